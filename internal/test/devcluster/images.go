package devcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Image is one image of the images directory: its full name and the OCI
// image archive that holds it.
type Image struct {
	Name string
	File string
}

// ImagesListFile is the file in the images directory that lists the images,
// one "<name> <file>" per line (make engine-images writes it).
const ImagesListFile = "images.txt"

// DefaultImagesDir returns where the images are looked for by default:
// $ENGINE_IMAGES_DIR if set (the Makefile exports it), else
// <CacheDir>/images, where make engine-images puts them.
func DefaultImagesDir() string {
	if dir := os.Getenv("ENGINE_IMAGES_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(CacheDir(), "images")
}

// ReadImages returns the images listed in dir's images.txt, each archive
// checked to exist; SandboxImage must be among them. Errors match
// fs.ErrNotExist when the list or an archive is missing.
func ReadImages(dir string) ([]Image, error) {
	if dir == "" {
		dir = DefaultImagesDir()
	}
	list := filepath.Join(dir, ImagesListFile)
	f, err := os.Open(list)
	if err != nil {
		return nil, fmt.Errorf("devcluster: the real node's images: %w; build them with `make engine-images`", err)
	}
	defer f.Close()
	var images []Image
	sandbox := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) != 2 {
			return nil, fmt.Errorf("devcluster: %s:%d: want \"<image name> <archive file>\", got %q", list, line, text)
		}
		img := Image{Name: fields[0], File: fields[1]}
		if !filepath.IsAbs(img.File) {
			img.File = filepath.Join(dir, img.File)
		}
		if _, err := os.Stat(img.File); err != nil {
			return nil, fmt.Errorf("devcluster: %s:%d: image %s: %w; rebuild them with `make engine-images`", list, line, img.Name, err)
		}
		sandbox = sandbox || img.Name == SandboxImage
		images = append(images, img)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("devcluster: read %s: %w", list, err)
	}
	if !sandbox {
		return nil, fmt.Errorf("devcluster: %s lists no sandbox image %s, which every pod needs; rebuild with `make engine-images`: %w",
			list, SandboxImage, os.ErrNotExist)
	}
	return images, nil
}

// importImages imports every image archive into containerd's k8s.io
// namespace (the kubelet's), then checks that each name is there, so that a
// misnamed archive fails here and not as an image pull that can never work.
func (n *realNode) importImages(ctx context.Context) error {
	for _, img := range n.images {
		if _, err := n.ctr(ctx, "images", "import", img.File); err != nil {
			return fmt.Errorf("devcluster: import image %s: %w", img.Name, err)
		}
	}
	out, err := n.ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, name := range strings.Fields(out) {
		have[name] = true
	}
	var missing []string
	for _, img := range n.images {
		if !have[img.Name] {
			missing = append(missing, fmt.Sprintf("%s (from %s)", img.Name, img.File))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("devcluster: containerd lacks %s after the import; the archive names another image (have: %s)",
			strings.Join(missing, ", "), strings.Join(strings.Fields(out), ", "))
	}
	return nil
}

// ctr runs ctr against the node's containerd in the k8s.io namespace.
func (n *realNode) ctr(ctx context.Context, args ...string) (string, error) {
	args = append([]string{"--address", n.path("containerd/containerd.sock"), "--namespace", "k8s.io"}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(n.binDir, Ctr), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args[4:], " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// shellImageRepositories are the repositories of the images built here
// that have a shell: the engine images, made from Debian packages. The
// others (the sandbox, the instance agent, the manager) hold nothing but
// their one program.
var shellImageRepositories = []string{"dbkeeper.local/postgres", "dbkeeper.local/mariadb"}

// helperImage returns the image of the local-path provisioner's helper pods,
// which make and remove the volume directories with /bin/sh: the first
// listed engine image.
func (n *realNode) helperImage() string {
	return helperImageOf(n.images)
}

func helperImageOf(images []Image) string {
	for _, img := range images {
		repo, _, _ := strings.Cut(img.Name, ":")
		if slices.Contains(shellImageRepositories, repo) {
			return img.Name
		}
	}
	return ""
}

// errNoHelperImage is returned when images.txt lists only the sandbox image.
var errNoHelperImage = errors.New("devcluster: images.txt lists no image with a shell for the volume provisioner's helper pods; build the engine images with `make engine-images`")

// InstanceImage returns the one image of images in InstanceImageRepository:
// the instance agent's image, whose tag follows the agent binary's content
// (make engine-images). It is an error when images.txt lists none or more
// than one, since a manager given another name would run pods whose init
// container can never pull its image.
func InstanceImage(images []Image) (string, error) {
	var found []string
	for _, img := range images {
		if strings.HasPrefix(img.Name, InstanceImageRepository+":") {
			found = append(found, img.Name)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("devcluster: %s lists no instance image %s:<tag>, which every postgres pod's init container runs; build it with `make engine-images`", ImagesListFile, InstanceImageRepository)
	default:
		return "", fmt.Errorf("devcluster: %s lists %d instance images (%s); keep one, or rebuild with `make engine-images`", ImagesListFile, len(found), strings.Join(found, ", "))
	}
}

// FakePodCIDR is the address range of the pods on the fake (kwok) nodes:
// they run no agent, and their addresses are not on this machine, so the
// manager must never call them (--agent-unreachable-cidrs).
func (c *Cluster) FakePodCIDR() string { return podCIDR }

// InstanceImage returns the image the manager must pass as --instance-image
// for pods to run on this cluster: on a real node, the instance image the
// node imported from images.txt; without one, "" (no pod runs, and the
// manager's own default is as good as any name). This is the one place that
// decides it: devcluster run, localrun and the test harnesses all ask here.
func (c *Cluster) InstanceImage() string {
	if c.node == nil {
		return ""
	}
	return c.node.instanceImage
}

// BackupImageRepository is the repository of the backup sidecar's image,
// barman-cloud (test/images/barman-cloud), whose tag is barman-cloud's
// version.
const BackupImageRepository = "dbkeeper.local/barman-cloud"

// BackupImage returns the image of images in BackupImageRepository, which the
// manager's --backup-image must name for postgres pods with spec.backup to
// start on the real node, or "" when images.txt lists none (built by make
// engine-images).
func BackupImage(images []Image) string {
	for _, img := range images {
		if strings.HasPrefix(img.Name, BackupImageRepository+":") {
			return img.Name
		}
	}
	return ""
}

// BackupImage returns the real node's backup sidecar image (see the function
// BackupImage), or "" without a real node or without the image.
func (c *Cluster) BackupImage() string {
	if c.node == nil {
		return ""
	}
	return BackupImage(c.node.images)
}

// ImportImage imports one more image archive into the real node, such as an
// instance image built from an earlier release for an upgrade test, and
// checks that it holds name.
func (c *Cluster) ImportImage(ctx context.Context, name, file string) error {
	if c.node == nil {
		return errors.New("devcluster: ImportImage needs a real node")
	}
	if _, err := c.node.ctr(ctx, "images", "import", file); err != nil {
		return fmt.Errorf("devcluster: import image %s: %w", name, err)
	}
	out, err := c.node.ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(out), name) {
		return fmt.Errorf("devcluster: containerd lacks %s after importing %s", name, file)
	}
	return nil
}
