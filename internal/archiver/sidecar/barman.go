package sidecar

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

// Store is where one Database's backups go, in barman-cloud's terms: the
// layout under Destination is barman-cloud's (and so CloudNativePG's),
// <Destination>/<ServerName>/{wals,base}/…, so users and their tools
// recognise it. Credentials are not here: barman-cloud reads them from its
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, and AWS_CA_BUNDLE
// for a private CA), which the sidecar gets from Secrets.
type Store struct {
	// Destination is s3://BUCKET[/PATH].
	Destination string
	// ServerName names the Database's directory under Destination.
	ServerName string
	// EndpointURL is the S3 endpoint, https://HOST[:PORT]; "" for AWS.
	EndpointURL string
	// Compression of WAL files and base backups.
	Compression archiver.Compression
	// Encryption is the server-side encryption the store applies to what
	// barman-cloud uploads (its --encryption, S3's
	// x-amz-server-side-encryption): EncryptionAES256 or EncryptionKMS;
	// "" leaves it to the bucket's default.
	Encryption string
	// KMSKeyID is the AWS KMS key of EncryptionKMS (barman-cloud's
	// --sse-kms-key-id, from barman-cloud 3.5); "": the AWS managed key.
	KMSKeyID string
}

// The server-side encryptions barman-cloud asks S3 for.
const (
	EncryptionAES256 = "AES256"
	EncryptionKMS    = "aws:kms"
)

// OptionSSEKMSKeyID is barman-cloud's option that names the KMS key of
// aws:kms encryption; barman-cloud 3.4 lacks it.
const OptionSSEKMSKeyID = "--sse-kms-key-id"

// Validate reports every field of s that barman-cloud would refuse.
func (s Store) Validate() error {
	var errs []error
	u, err := url.Parse(s.Destination)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("destination %q: %w", s.Destination, err))
	case u.Scheme != "s3" || u.Host == "":
		errs = append(errs, fmt.Errorf("destination %q: want s3://BUCKET[/PATH]", s.Destination))
	}
	if s.ServerName == "" || strings.ContainsAny(s.ServerName, "/ ") {
		errs = append(errs, fmt.Errorf("server name %q: want a name without slashes or spaces", s.ServerName))
	}
	if s.EndpointURL != "" {
		u, err := url.Parse(s.EndpointURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("endpoint URL %q: want https://HOST[:PORT]", s.EndpointURL))
		}
	}
	switch s.Compression {
	case archiver.CompressionNone, archiver.CompressionGzip, archiver.CompressionBzip2:
	default:
		errs = append(errs, fmt.Errorf("compression %q: want gzip, bzip2 or none", s.Compression))
	}
	switch s.Encryption {
	case "", EncryptionAES256, EncryptionKMS:
	default:
		errs = append(errs, fmt.Errorf("encryption %q: want %s, %s or none", s.Encryption, EncryptionAES256, EncryptionKMS))
	}
	if s.KMSKeyID != "" && s.Encryption != EncryptionKMS {
		errs = append(errs, fmt.Errorf("a KMS key %q without %s encryption", s.KMSKeyID, EncryptionKMS))
	}
	return errors.Join(errs...)
}

// cloud is the options every barman-cloud command takes.
func (s Store) cloud() []string {
	args := []string{"--cloud-provider", "aws-s3"}
	if s.EndpointURL != "" {
		args = append(args, "--endpoint-url", s.EndpointURL)
	}
	return args
}

func (s Store) compression() []string {
	switch s.Compression {
	case archiver.CompressionGzip:
		return []string{"--gzip"}
	case archiver.CompressionBzip2:
		return []string{"--bzip2"}
	}
	return nil
}

// encryption is the options of the commands that upload: the
// server-side encryption and its KMS key.
func (s Store) encryption() []string {
	var args []string
	if s.Encryption != "" {
		args = append(args, "--encryption", s.Encryption)
	}
	if s.KMSKeyID != "" {
		args = append(args, OptionSSEKMSKeyID, s.KMSKeyID)
	}
	return args
}

func command(name string, parts ...[]string) []string {
	args := []string{name}
	for _, p := range parts {
		args = append(args, p...)
	}
	return args
}

// WALArchive is the command that archives the WAL file at path.
func (s Store) WALArchive(path string) []string {
	return command(archiver.CommandWALArchive, s.cloud(), s.compression(), s.encryption(), []string{s.Destination, s.ServerName, path})
}

// WALRestore is the command that fetches the WAL file name (%f) into
// dest (%p).
func (s Store) WALRestore(name, dest string) []string {
	return command(archiver.CommandWALRestore, s.cloud(), []string{s.Destination, s.ServerName, name, dest})
}

// Conn is how barman-cloud-backup reaches the server: the sidecar shares
// the postgres container's socket directory, where local connections are
// trusted.
type Conn struct {
	Host string // the socket directory
	Port int
	User string
}

// Backup is the command that takes a base backup named name (shown by
// barman-cloud-backup-list) through conn. immediate asks for an immediate
// checkpoint (an on-demand backup) instead of a spread one.
func (s Store) Backup(name string, conn Conn, immediate bool) []string {
	opts := []string{"-h", conn.Host, "-p", fmt.Sprint(conn.Port), "-U", conn.User, "-d", "postgres"}
	if name != "" {
		opts = append(opts, "--name", name)
	}
	if immediate {
		opts = append(opts, "--immediate-checkpoint")
	}
	return command(archiver.CommandBackup, s.cloud(), s.compression(), s.encryption(), opts, []string{s.Destination, s.ServerName})
}

// BackupList is the command that lists the backups as JSON.
func (s Store) BackupList() []string {
	return command(archiver.CommandBackupList, s.cloud(), []string{"--format", "json", s.Destination, s.ServerName})
}

// Restore is the command that downloads the base backup backupID into dir.
func (s Store) Restore(backupID, dir string) []string {
	return command(archiver.CommandBackupRestore, s.cloud(), []string{s.Destination, s.ServerName, backupID, dir})
}

// CheckWALArchive is the command that fails unless the WAL archive holds no
// file of timeline or later (every file, when timeline is 0): a new
// Database must not archive over another one's WAL (barman-cloud's check
// is one of emptiness, not of gaps: Gaps checks those).
func (s Store) CheckWALArchive(timeline uint32) []string {
	opts := []string{}
	if timeline > 0 {
		opts = append(opts, "--timeline", fmt.Sprint(timeline))
	}
	return command(archiver.CommandCheckWALArchive, s.cloud(), opts, []string{s.Destination, s.ServerName})
}

// DeleteByRetention is the command that deletes the backups, and the WAL
// only they need, that a retention policy (RetentionRequest.Policy) no
// longer keeps.
func (s Store) DeleteByRetention(policy string) []string {
	return command(archiver.CommandBackupDelete, s.cloud(), []string{"--retention-policy", policy, s.Destination, s.ServerName})
}
