// Package images holds the engine images built here for tests on a real
// node, with no registry and no container engine (see docs/images.md), and
// a test that runs each one with runc exactly as dbkeeper's StatefulSet
// would: its env, args, user, read-only root file system, volumes and probe
// commands come from the builder in internal/desired.
//
// The images are built by `make engine-images` (hack/engine-images.sh) from
// the image.sh file of each directory here; ociimage writes the archives.
package images
