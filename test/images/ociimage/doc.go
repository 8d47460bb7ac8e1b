// Package ociimage writes single-layer OCI image archives from a root file
// system directory and an image configuration, with no registry and no
// container engine. The archives are reproducible: the same directory and
// configuration always give the same bytes, because entries are sorted, every
// modification time is fixed and no host user or group name is recorded.
// containerd imports them with `ctr -n k8s.io images import FILE` under the
// name given in Image.Name.
package ociimage
