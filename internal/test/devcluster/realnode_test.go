package devcluster

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster/nodehost"
)

func TestReadImages(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"pause.tar", "pg.tar"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(list string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, ImagesListFile), []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write("# images\n" + SandboxImage + " pause.tar\ndbkeeper.local/postgres:17.7 " + filepath.Join(dir, "pg.tar") + "\n\n")
	images, err := ReadImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Image{{SandboxImage, filepath.Join(dir, "pause.tar")}, {"dbkeeper.local/postgres:17.7", filepath.Join(dir, "pg.tar")}}
	if len(images) != 2 || images[0] != want[0] || images[1] != want[1] {
		t.Errorf("ReadImages = %v, want %v", images, want)
	}

	for _, tc := range []struct {
		list, wantErr string
		notExist      bool
	}{
		{"dbkeeper.local/postgres:17.7 pg.tar\n", "lists no sandbox image", true},
		{SandboxImage + " missing.tar\n", "missing.tar", true},
		{SandboxImage + "\n", `want "<image name> <archive file>"`, false},
	} {
		write(tc.list)
		_, err := ReadImages(dir)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ReadImages(%q) = %v, want an error containing %q", tc.list, err, tc.wantErr)
			continue
		}
		if errors.Is(err, fs.ErrNotExist) != tc.notExist {
			t.Errorf("ReadImages(%q): errors.Is(err, fs.ErrNotExist) = %v, want %v", tc.list, !tc.notExist, tc.notExist)
		}
	}
	if _, err := ReadImages(t.TempDir()); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "make engine-images") {
		t.Errorf("ReadImages(empty dir) = %v, want a not-exist error naming make engine-images", err)
	}
}

func TestInstanceImage(t *testing.T) {
	inst := Image{Name: InstanceImageRepository + ":0b0776f443589419"}
	other := Image{Name: InstanceImageRepository + ":1111111111111111"}
	pause := Image{Name: SandboxImage}
	// A name that only starts like the repository is another image.
	lookalike := Image{Name: InstanceImageRepository + "-debug:1"}
	for _, tc := range []struct {
		images  []Image
		want    string
		wantErr string
	}{
		{[]Image{pause, inst, lookalike}, inst.Name, ""},
		{[]Image{pause, lookalike}, "", "lists no instance image"},
		{[]Image{inst, pause, other}, "", "lists 2 instance images"},
	} {
		got, err := InstanceImage(tc.images)
		if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("InstanceImage(%v) = %q, %v; want %q, an error containing %q", tc.images, got, err, tc.want, tc.wantErr)
		}
	}
	if got := (&Cluster{}).InstanceImage(); got != "" {
		t.Errorf("InstanceImage of a cluster without a real node = %q, want \"\" (the manager's default)", got)
	}
}

// TestCNIConfigIsNoGateway checks the safety properties of the pods'
// network: no masquerade, no default route, only the Service range routed.
func TestCNIConfigIsNoGateway(t *testing.T) {
	n := &realNode{dir: "/run-dir/node"}
	data, err := n.cniConfig()
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type, Bridge     string
			IsGateway        bool
			IsDefaultGateway bool
			IPMasq           bool
			IPAM             struct {
				Routes []struct{ Dst, GW string }
			}
		}
	}
	if err := json.Unmarshal([]byte(data), &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 1 {
		t.Fatalf("plugins = %d, want only the bridge", len(conf.Plugins))
	}
	p := conf.Plugins[0]
	if p.Type != "bridge" || p.Bridge != nodehost.Bridge || p.IsGateway || p.IsDefaultGateway || p.IPMasq {
		t.Errorf("bridge plugin = %+v, want bridge %s, no gateway, no masquerade", p, nodehost.Bridge)
	}
	if len(p.IPAM.Routes) != 1 || p.IPAM.Routes[0].Dst != serviceCIDR || p.IPAM.Routes[0].GW != nodehost.BridgeIP {
		t.Errorf("routes = %+v, want only %s via %s", p.IPAM.Routes, serviceCIDR, nodehost.BridgeIP)
	}
}

// TestHelperImageIsAnEngineImage: the volume provisioner's helper pods run
// /bin/sh, which only the engine images have; an image without a shell
// listed first (the manager's sorts before the engines') must not be
// chosen, or no claim is ever provisioned.
func TestHelperImageIsAnEngineImage(t *testing.T) {
	for _, tc := range []struct {
		images []string
		want   string
	}{
		{[]string{"dbkeeper.local/dbkeeper:04bf001f", "dbkeeper.local/dbkeeper-instance:588e2954", "dbkeeper.local/mariadb:10.11.19", "dbkeeper.local/pause:3.10", "dbkeeper.local/postgres:15.20"}, "dbkeeper.local/mariadb:10.11.19"},
		{[]string{"dbkeeper.local/pause:3.10", "dbkeeper.local/postgres:17.10"}, "dbkeeper.local/postgres:17.10"},
		{[]string{"dbkeeper.local/pause:3.10", "dbkeeper.local/dbkeeper-instance:588e2954", "dbkeeper.local/postgres-exporter:1"}, ""},
	} {
		var images []Image
		for _, name := range tc.images {
			images = append(images, Image{Name: name})
		}
		if got := helperImageOf(images); got != tc.want {
			t.Errorf("helperImageOf(%v) = %q, want %q", tc.images, got, tc.want)
		}
	}
}
