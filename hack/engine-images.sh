#!/usr/bin/env bash
# engine-images.sh builds the OCI image archives of the engines the tests run
# on a real node (and the node's pause image) into DIR, with no registry and no
# container engine, and lists them in DIR/images.txt as "<name> <file>" lines.
# Each image is rebuilt only when its inputs change: the key in its file name
# hashes the image's directory under test/images, the image writer, this
# script and the versions of the packages it is made of; the packages
# installed for an image are cached in DIR/.base, so that a change of an
# entrypoint does not install them again. Usage: hack/engine-images.sh DIR [IMAGE...]
# where IMAGE is a directory name under test/images (default: all of them).
set -euo pipefail
umask 022

dir=${1:?usage: hack/engine-images.sh DIR [IMAGE...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
images_root=$root/test/images
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
list=$dir/images.txt
start=$SECONDS

log() { printf 'engine-images: %s (%ds)\n' "$*" $((SECONDS - start)) >&2; }

# shellcheck source=test/images/lib.sh
source "$images_root/lib.sh"

# The image writer, built once per run (the Go build cache makes it quick).
tool=$dir/.bin/ociimage
(cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$tool" ./test/images/cmd/ociimage)

# list_set NAME FILE replaces NAME's line in images.txt, atomically, so that a
# reader (devcluster polls it) never sees a half-written list. Lines whose
# archive is gone go too: an image whose tag follows its content (the
# instance image) leaves its old tag's line behind.
list_set() {
	local tmp name file
	tmp=$(mktemp "$dir/.images.txt.XXXXXX")
	{
		if [[ -f $list ]]; then
			while read -r name file; do
				if [[ $name != "$1" && -f $file ]]; then
					printf '%s %s\n' "$name" "$file"
				fi
			done <"$list"
		fi
		printf '%s %s\n' "$1" "$2"
	} | sort >"$tmp"
	chmod 0644 "$tmp"
	mv "$tmp" "$list"
}

# hash_inputs prints a short key of the files given and of stdin.
hash_inputs() {
	{
		cat
		for f in "$@"; do
			printf '%s\n' "${f#"$root"/}"
			cat "$f"
		done
	} | sha256sum | cut -c1-16
}

work=""
cleanup() {
	if [[ -n $work && -d $work ]]; then
		rm -rf "$work"
	fi
}
trap cleanup EXIT

# build_image IMAGE runs test/images/IMAGE/image.sh, which defines:
#   image_name       the full reference, such as dbkeeper.local/pause:3.10
#   image_key_input  a function printing what besides the image's files
#                    decides its content (package versions, Go version)
#   image_rootfs     a function filling the root file system directory $1 and
#                    writing the image configuration to the file $2
#   image_shared     optionally, directories under test/images whose files
#                    are inputs too; their common.sh is sourced
build_image() {
	local image=$1 src=$images_root/$1
	if [[ ! -f $src/image.sh ]]; then
		echo "engine-images: no image $image: want a directory under test/images with an image.sh" >&2
		return 1
	fi
	unset -v image_name image_shared
	unset -f image_key_input image_rootfs
	image_shared=()
	debian_suite=$host_suite
	# shellcheck source=/dev/null
	source "$src/image.sh"
	local inputs=("$src" "$images_root/ociimage" "$images_root/cmd" "$images_root/lib.sh" "$root/hack/engine-images.sh") shared
	for shared in "${image_shared[@]}"; do
		inputs+=("$images_root/$shared")
		if [[ -f $images_root/$shared/common.sh ]]; then
			# shellcheck source=/dev/null
			source "$images_root/$shared/common.sh"
		fi
	done
	local files key file
	mapfile -t files < <(find "${inputs[@]}" -type f ! -name '*_test.go' | LC_ALL=C sort)
	key=$(image_key_input | hash_inputs "${files[@]}")
	# shellcheck disable=SC2154 # image_name is set by image.sh.
	file=$dir/$image-${image_name##*:}-$key.tar
	# FILE.bases names the installed-package caches the image was built
	# from, so that pruning keeps them while the image is current.
	if [[ -f $file ]]; then
		log "$image_name up to date ($(du -h "$file" | cut -f1)): $file"
		if [[ -f ${file%.tar}.bases ]]; then
			mapfile -t -O "${#used_bases[@]}" used_bases <"${file%.tar}.bases"
		fi
		list_set "$image_name" "$file"
		return 0
	fi
	local first_base=${#used_bases[@]}
	log "building $image_name"
	work=$(mktemp -d "$dir/.build-$image.XXXXXX")
	mkdir "$work/rootfs"
	image_rootfs "$work/rootfs" "$work/config.json"
	log "writing $image_name"
	"$tool" -name "$image_name" -rootfs "$work/rootfs" -config "$work/config.json" \
		-created-by "hack/engine-images.sh test/images/$image" -out "$file"
	printf '%s\n' "${used_bases[@]:first_base}" >"${file%.tar}.bases"
	rm -rf "$work"
	work=""
	# Drop the archives of earlier inputs of the same image. After the
	# image's name comes a version or a hash, so the manager's "dbkeeper-"
	# never matches the instance agent's "dbkeeper-instance-" archives.
	find "$dir" -maxdepth 1 \( -name "$image-[0-9a-f]*.tar" -o -name "$image-[0-9a-f]*.bases" \) ! -path "$file" ! -path "${file%.tar}.bases" -delete
	list_set "$image_name" "$file"
	log "built $image_name ($(du -h "$file" | cut -f1))"
}

all=false
if [[ $# -eq 0 ]]; then
	all=true
	# The pause image first: a real node needs it before anything else.
	mapfile -t others < <(cd "$images_root" && find . -mindepth 2 -maxdepth 2 -name image.sh -printf '%h\n' | sed 's|^\./||' | grep -vx pause | LC_ALL=C sort)
	set -- pause "${others[@]}"
fi
for image in "$@"; do
	build_image "$image"
done
if $all; then
	# Installed packages that no image uses any more.
	for base in "$dir"/.base/*.tar; do
		[[ -e $base ]] || continue
		if [[ " ${used_bases[*]} " != *" $(basename "$base" .tar) "* ]]; then
			log "removing the unused installed packages $base"
			rm -f "$base"
		fi
	done
fi
log "all images listed in $list"
