#!/usr/bin/env bash
# backup-tools.sh builds the binaries that backups need outside the images from
# the Go module proxy into DIR: versitygw, the S3-compatible object store that
# devcluster and the tests write backups to, from its wrapper module under
# hack/backup (stamping its version into main.Version, as versitygw does). A
# binary is rebuilt only when the version of its module differs from the one
# recorded beside it (DIR/.NAME.version; hack/lib/go-tools.sh).
# Usage: hack/backup-tools.sh DIR
set -euo pipefail

dir=${1:?usage: hack/backup-tools.sh DIR}
# shellcheck source=lib/go-tools.sh
. "$(dirname "$0")/lib/go-tools.sh"

# name  module-dir  module  package  version-variable
build_go_tools backup-tools "$dir" "" \
	"versitygw backup/versitygw github.com/versity/versitygw github.com/versity/versitygw/cmd/versitygw main.Version"
