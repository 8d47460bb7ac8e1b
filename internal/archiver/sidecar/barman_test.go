package sidecar

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

func TestStoreCommands(t *testing.T) {
	s := Store{Destination: "s3://backups/dbkeeper", ServerName: "orders", EndpointURL: "https://store.dbkeeper-system.svc:7070", Compression: archiver.CompressionGzip}
	tests := []struct {
		name string
		got  []string
		want string
	}{
		{"archives a WAL file compressed", s.WALArchive("/data/pg_wal/000000010000000000000001"),
			"barman-cloud-wal-archive --cloud-provider aws-s3 --endpoint-url https://store.dbkeeper-system.svc:7070 --gzip s3://backups/dbkeeper orders /data/pg_wal/000000010000000000000001"},
		{"restores a WAL file (compression is detected)", s.WALRestore("00000002.history", "/data/pg_wal/RECOVERYHISTORY"),
			"barman-cloud-wal-restore --cloud-provider aws-s3 --endpoint-url https://store.dbkeeper-system.svc:7070 s3://backups/dbkeeper orders 00000002.history /data/pg_wal/RECOVERYHISTORY"},
		{"takes a named backup over the shared socket", s.Backup("orders-20260101", Conn{Host: "/var/run/postgresql", Port: 5432, User: "postgres"}, true),
			"barman-cloud-backup --cloud-provider aws-s3 --endpoint-url https://store.dbkeeper-system.svc:7070 --gzip -h /var/run/postgresql -p 5432 -U postgres -d postgres --name orders-20260101 --immediate-checkpoint s3://backups/dbkeeper orders"},
		{"checks a new timeline's archive", s.CheckWALArchive(3),
			"barman-cloud-check-wal-archive --cloud-provider aws-s3 --endpoint-url https://store.dbkeeper-system.svc:7070 --timeline 3 s3://backups/dbkeeper orders"},
		{"deletes by a recovery window", s.DeleteByRetention("RECOVERY WINDOW OF 7 DAYS"),
			"barman-cloud-backup-delete --cloud-provider aws-s3 --endpoint-url https://store.dbkeeper-system.svc:7070 --retention-policy RECOVERY WINDOW OF 7 DAYS s3://backups/dbkeeper orders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(tt.got, " "); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	enc := s
	enc.Encryption, enc.KMSKeyID = EncryptionKMS, "alias/dbkeeper"
	for _, argv := range [][]string{enc.WALArchive("/p"), enc.Backup("b", Conn{Host: "/run", Port: 5432, User: "postgres"}, false)} {
		if got := strings.Join(argv, " "); !strings.Contains(got, " --encryption aws:kms --sse-kms-key-id alias/dbkeeper ") {
			t.Errorf("%s: no server-side encryption in %s", argv[0], got)
		}
	}
	for _, argv := range [][]string{enc.WALRestore("f", "/d"), enc.BackupList(), enc.Restore("id", "/d"), enc.CheckWALArchive(0), enc.DeleteByRetention("REDUNDANCY 1")} {
		if slices.Contains(argv, "--encryption") {
			t.Errorf("%s uploads nothing but was given --encryption: %v", argv[0], argv)
		}
	}
	aws := Store{Destination: "s3://b", ServerName: "x"}
	if got := aws.WALArchive("/p"); slices.Contains(got, "--endpoint-url") || slices.Contains(got, "--gzip") {
		t.Errorf("AWS without compression: %v", got)
	}
}

func TestStoreValidate(t *testing.T) {
	bad := Store{Destination: "https://backups", ServerName: "a/b", EndpointURL: "store:7070", Compression: "zstd", Encryption: "aws:kms:dsse", KMSKeyID: "k"}
	err := bad.Validate()
	for _, want := range []string{"want s3://BUCKET[/PATH]", "without slashes", "want https://HOST[:PORT]", "want gzip, bzip2 or none", "want AES256, aws:kms or none", "without aws:kms encryption"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
	if err := (Store{Destination: "s3://backups/orders", ServerName: "orders"}).Validate(); err != nil {
		t.Errorf("a plain AWS store: %v", err)
	}
}

func TestParseBackupList(t *testing.T) {
	out := []byte(`{"backups_list": [
	 {"backup_id": "20260101T000000", "backup_name": "a", "begin_wal": "000000010000000000000002", "end_wal": "000000010000000000000002", "begin_time": "x", "end_time": "y", "begin_xlog": "0/2000028", "end_xlog": "0/2000100", "size": 3145728, "status": "DONE"},
	 {"backup_id": "20260102T000000", "status": "FAILED"}]}`)
	got, err := ParseBackupList(out)
	if err != nil || len(got) != 1 || got[0].ID != "20260101T000000" || got[0].Name != "a" || got[0].BeginWAL != "000000010000000000000002" ||
		got[0].BeginLSN != "0/2000028" || got[0].EndLSN != "0/2000100" || got[0].Size != 3145728 {
		t.Errorf("ParseBackupList = %+v, %v; want only the DONE backup", got, err)
	}
}

// A restore's first barman-cloud commands run before the data directory
// exists (found on the real node: barman-cloud-backup-list failed with
// "chdir …/pgdata: no such file or directory").
func TestRunBeforeTheDataDirectoryExists(t *testing.T) {
	s := &Server{PGData: filepath.Join(t.TempDir(), "pgdata")}
	out, err := s.runEnv(t.Context(), []string{"PATH=/usr/bin:/bin"}, []string{"pwd"})
	if err != nil {
		t.Fatalf("running a command before %s exists: %v", s.PGData, err)
	}
	if got := strings.TrimSpace(string(out)); got != filepath.Dir(s.PGData) {
		t.Errorf("ran in %s, want the volume %s", got, filepath.Dir(s.PGData))
	}
}

func TestNotInArchive(t *testing.T) {
	for code, want := range map[string]bool{"1": true, "2": false, "4": false} {
		err := exec.Command("sh", "-c", "exit "+code).Run()
		if got := notInArchive(fmt.Errorf("barman-cloud-wal-restore: %w", err)); got != want {
			t.Errorf("exit %s: notInArchive = %v, want %v", code, got, want)
		}
	}
	if notInArchive(errors.New("calling the sidecar: connection refused")) {
		t.Error("a failure to run barman-cloud counts as a missing file")
	}
}
