package archiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Client calls the sidecar's Server over its Unix socket: the agent's
// `archive` and `restore` subcommands (PostgreSQL's archive_command and
// restore_command) and the agent itself (backups, status).
type Client struct {
	http *http.Client
}

// NewClient returns a Client of the socket at path.
func NewClient(path string) *Client {
	return &Client{http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}}
}

// Archive asks the sidecar to archive the WAL file at path (absolute) and
// returns once it is in the object store, or why not.
func (c *Client) Archive(ctx context.Context, path string) error {
	return c.call(ctx, http.MethodPost, PathArchive, ArchiveRequest{Path: path}, nil)
}

// Restore asks the sidecar to fetch the WAL file name into dest (absolute).
func (c *Client) Restore(ctx context.Context, name, dest string) error {
	return c.call(ctx, http.MethodPost, PathRestore, RestoreRequest{Name: name, Dest: dest}, nil)
}

// RestoreFromRecovery asks the sidecar to fetch the WAL file name into
// dest from the recovery source's store.
func (c *Client) RestoreFromRecovery(ctx context.Context, name, dest string) error {
	return c.call(ctx, http.MethodPost, PathRestore, RestoreRequest{Name: name, Dest: dest, Recovery: true}, nil)
}

// CheckArchive returns nil when the Database's own WAL archive is empty
// (or it has none), and barman-cloud's reason otherwise.
func (c *Client) CheckArchive(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, PathCheckArchive, nil, nil)
}

// RecoveryBackups lists the recovery source's completed backups, oldest
// first.
func (c *Client) RecoveryBackups(ctx context.Context) ([]BackupResult, error) {
	var list []BackupResult
	err := c.call(ctx, http.MethodGet, PathRecoveryBackups, nil, &list)
	return list, err
}

// RecoveryRestore downloads the recovery source's backup backupID into
// RestoreDir(PGDATA).
func (c *Client) RecoveryRestore(ctx context.Context, backupID string) error {
	return c.call(ctx, http.MethodPost, PathRecoveryRestore, RecoveryRestoreRequest{BackupID: backupID}, nil)
}

// Backup takes a base backup and returns barman-cloud's record of it.
func (c *Client) Backup(ctx context.Context, req BackupRequest) (BackupResult, error) {
	var res BackupResult
	err := c.call(ctx, http.MethodPost, PathBackup, req, &res)
	return res, err
}

// Retention deletes the backups a retention policy no longer keeps and
// returns those that remain, oldest first.
func (c *Client) Retention(ctx context.Context, req RetentionRequest) (RetentionResult, error) {
	var res RetentionResult
	err := c.call(ctx, http.MethodPost, PathRetention, req, &res)
	return res, err
}

// Status returns what the sidecar knows of archiving.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.call(ctx, http.MethodGet, PathStatus, nil, &st)
	return st, err
}

// ErrNotInArchive is Restore's error for a file the store does not have.
var ErrNotInArchive = errors.New("not in the archive")

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body bytes.Buffer
	if in != nil {
		if err := json.NewEncoder(&body).Encode(in); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://archiver"+path, &body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("calling the backup sidecar: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode >= 300 {
		var e ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		if resp.StatusCode == http.StatusNotFound && path == PathRestore {
			return fmt.Errorf("%w: %s", ErrNotInArchive, e.Error)
		}
		return fmt.Errorf("backup sidecar: %s: %s", resp.Status, e.Error)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}
