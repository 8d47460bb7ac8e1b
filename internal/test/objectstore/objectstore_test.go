package objectstore

import (
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	full := Config{Addr: "10.245.0.1:9000", AccessKey: "a", SecretKey: "s", CertFile: "c.crt", KeyFile: "c.key", DataDir: "/d", Buckets: []string{"backups"}}
	tests := []struct {
		name    string
		mutate  func(*Config)
		want    []string
		wantErr string
	}{
		{"full", func(*Config) {}, []string{"--port", "10.245.0.1:9000", "--access", "a", "--secret", "s",
			"--cert", "c.crt", "--key", "c.key", "--quiet", "posix", "/d"}, ""},
		{"no address", func(c *Config) { c.Addr = "" }, nil, "Config.Addr is empty"},
		{"address without port", func(c *Config) { c.Addr = "10.245.0.1" }, nil, "not host:port"},
		{"no secret", func(c *Config) { c.SecretKey = "" }, nil, "Config.SecretKey is empty"},
		{"no key file", func(c *Config) { c.KeyFile = "" }, nil, "Config.KeyFile is empty"},
		{"no data dir", func(c *Config) { c.DataDir = "" }, nil, "Config.DataDir is empty"},
		{"bad bucket", func(c *Config) { c.Buckets = []string{"Backups"} }, nil, `bucket name "Backups"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := full
			tt.mutate(&cfg)
			got, err := Args(cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Args() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("Args() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestCheckBucketName(t *testing.T) {
	for name, ok := range map[string]bool{
		"backups": true, "my-bucket.2": true, "abc": true,
		"ab": false, "-abc": false, "abc-": false, "a_bc": false, "ABC": false, strings.Repeat("a", 64): false,
	} {
		if err := CheckBucketName(name); (err == nil) != ok {
			t.Errorf("CheckBucketName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestCheckBinary(t *testing.T) {
	if err := CheckBinary(t.TempDir() + "/versitygw"); err == nil || !strings.Contains(err.Error(), "make backup-tools") {
		t.Fatalf("CheckBinary(missing) = %v, want an error naming make backup-tools", err)
	}
}
