package archiver

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "latest", want: "latest"},
		{in: "time=2026-12-04T06:57:37Z", want: "time=2026-12-04T06:57:37Z"},
		{in: "time=2026-12-04T07:57:37.25+01:00", want: "time=2026-12-04T06:57:37.25Z"},
		{in: "lsn=0/7000028", want: "lsn=0/7000028"},
		{in: "lsn=0/0", want: "lsn=0/0"},
		{in: "latest=x", err: "takes no value"},
		{in: "time=yesterday", err: "cannot parse"},
		{in: "lsn=7000028", err: "lsn=7000028"},
		{in: "", err: "want latest"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTarget(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestChooseBackup(t *testing.T) {
	// Three backups as barman-cloud-backup-list lists them, oldest first.
	backups := []BackupResult{
		{ID: "20261201T030000", EndTime: "Tue Dec  1 03:00:12 2026", EndLSN: "0/3000100"},
		{ID: "20261202T030000", EndTime: "Wed Dec  2 03:00:09 2026", EndLSN: "0/9000050"},
		{ID: "20261203T030000", EndTime: "Thu Dec  3 03:00:15 2026", EndLSN: "1/2000000"},
	}
	at := func(s string) Target {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return Target{Time: tm}
	}
	lsn := func(s string) Target {
		tg, err := ParseTarget("lsn=" + s)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	tests := []struct {
		name    string
		backups []BackupResult
		target  Target
		want    string
		err     string
	}{
		{name: "latest takes the newest backup", backups: backups, target: Target{}, want: "20261203T030000"},
		{name: "a time between two backups takes the one that ended before it", backups: backups, target: at("2026-12-02T12:00:00Z"), want: "20261202T030000"},
		{name: "a time in another zone is compared in UTC", backups: backups, target: at("2026-12-02T04:00:10+01:00"), want: "20261202T030000"},
		{name: "a time one second before a backup's end takes the one before", backups: backups, target: at("2026-12-02T03:00:08Z"), want: "20261201T030000"},
		{name: "a time at a backup's end takes it", backups: backups, target: at("2026-12-02T03:00:09Z"), want: "20261202T030000"},
		{name: "a time after the newest backup takes it", backups: backups, target: at("2026-12-04T06:57:37Z"), want: "20261203T030000"},
		{name: "a time before the first backup ended names the earliest recoverable point", backups: backups, target: at("2026-12-01T03:00:00Z"),
			err: "the target time 2026-12-01T03:00:00Z lies before the earliest recoverable point, Tue Dec  1 03:00:12 2026 UTC (the end of the oldest backup, 20261201T030000, LSN 0/3000100): choose a target after it"},
		{name: "an LSN between two backups takes the one that ended before it", backups: backups, target: lsn("0/A000000"), want: "20261202T030000"},
		{name: "an LSN in the next 4 GB takes the newest", backups: backups, target: lsn("1/2000000"), want: "20261203T030000"},
		{name: "an LSN before the first backup ended names its end", backups: backups, target: lsn("0/3000000"),
			err: "the target LSN 0/3000000 lies before the earliest recoverable point, LSN 0/3000100"},
		{name: "no backup at all", backups: nil, target: Target{}, err: ErrNoBackups.Error()},
		{name: "no backup for a time either", backups: nil, target: at("2026-12-02T12:00:00Z"), err: ErrNoBackups.Error()},
		{name: "an unreadable end time is an error, not a silent skip", backups: []BackupResult{{ID: "20261201T030000", EndTime: "yesterday"}}, target: at("2026-12-02T12:00:00Z"),
			err: `backup 20261201T030000: end time "yesterday"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChooseBackup(tt.backups, tt.target)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want {
				t.Errorf("chose %s, want %s", got.ID, tt.want)
			}
		})
	}
	var bf *BeforeFirstError
	if _, err := ChooseBackup(backups, at("2026-11-30T00:00:00Z")); !errors.As(err, &bf) || bf.First.ID != "20261201T030000" {
		t.Errorf("a target before the first backup: %v, want a BeforeFirstError naming 20261201T030000", err)
	}
}
