// Package objectstore runs versitygw, the S3-compatible object store that
// backups are tested against and devcluster serves, as a supervised process:
// its posix backend over a directory, whose top-level directories are the
// buckets and whose files are the objects under their keys, serving HTTPS
// with a given certificate. hack/backup-tools.sh (make backup-tools) builds
// the binary into BinDir.
//
// Args builds the command line (pure); Store starts the process, creates the
// buckets as directories and waits until the store completes a TLS handshake
// with a certificate the given CA signed.
package objectstore
