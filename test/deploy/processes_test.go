package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/test/process"
)

// eventuallyWhileRunning polls check every interval until it returns ""
// and returns how long that took; it fails the test at once when one of
// procs exited, and after timeout with check's last answer.
func eventuallyWhileRunning(t testing.TB, procs []*process.Process, interval, timeout time.Duration, what string, check func() string) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < timeout {
		for _, p := range procs {
			if err := exited(p); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
		}
		if last = check(); last == "" {
			return time.Since(start)
		}
		time.Sleep(interval)
	}
	t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
	return 0
}

// exited returns an error if the process has exited.
func exited(p *process.Process) error {
	if err := p.ExitErr(); err != nil {
		return fmt.Errorf("%s exited (%w); see %s", p.Name, err, p.LogPath)
	}
	return nil
}

// written is one version of a Secret's data written to the volume.
type written struct {
	at     time.Time
	serial string // of tls.crt
	sizes  map[string]int
}

// secretVolume keeps a directory in sync with a Secret the way the kubelet
// updates a Secret volume: each version of the data is written to a new
// directory, which the ..data symlink is atomically switched to, and each
// key is a symlink through ..data. A deleted Secret leaves the last files.
type secretVolume struct {
	dir    string
	key    client.ObjectKey
	client client.Client

	mu       sync.Mutex
	digest   string // of the data last written
	writes   int
	updated  time.Time // when data that differed was last written
	history  []written
	lastErr  error
	stop     context.CancelFunc
	finished chan struct{}
}

// syncSecret starts copying the Secret into dir every 100ms until the test ends.
func syncSecret(t testing.TB, c client.Client, key client.ObjectKey, dir string) *secretVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &secretVolume{dir: dir, key: key, client: c, stop: cancel, finished: make(chan struct{})}
	go func() {
		defer close(v.finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			v.sync(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-v.finished })
	return v
}

func (v *secretVolume) sync(ctx context.Context) {
	secret := &corev1.Secret{}
	err := v.client.Get(ctx, v.key, secret)
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case apierrors.IsNotFound(err), ctx.Err() != nil:
		return
	case err != nil:
		v.lastErr = err
		return
	case len(secret.Data[corev1.TLSCertKey]) == 0 || digest(secret.Data) == v.digest:
		return
	}
	if err := v.write(secret.Data); err != nil {
		v.lastErr = err
		return
	}
	v.digest, v.updated, v.lastErr = digest(secret.Data), time.Now(), nil
	v.writes++
	sizes := map[string]int{}
	for k, d := range secret.Data {
		sizes[k] = len(d)
	}
	v.history = append(v.history, written{at: v.updated, serial: serial(secret.Data[corev1.TLSCertKey]), sizes: sizes})
}

// digest identifies a Secret's data.
func digest(data map[string][]byte) string {
	h := sha256.New()
	for _, key := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s=%d:%s;", key, len(data[key]), data[key])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// write is the kubelet's atomic writer in short.
func (v *secretVolume) write(data map[string][]byte) error {
	version := fmt.Sprintf("..%s.%d", time.Now().UTC().Format("2006_01_02_15_04_05"), v.writes)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o700); err != nil {
		return err
	}
	for key, value := range data {
		if err := os.WriteFile(filepath.Join(v.dir, version, key), value, 0o600); err != nil {
			return err
		}
	}
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		return err
	}
	for key := range data {
		link := filepath.Join(v.dir, key)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", key), link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(v.dir, old))
	}
	return nil
}

// firstWritten returns when tls.crt with that serial was first written.
func (v *secretVolume) firstWritten(serial string) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, w := range v.history {
		if w.serial == serial {
			return w.at, true
		}
	}
	return time.Time{}, false
}

// log returns the versions written since a time, for the test log.
func (v *secretVolume) log(since time.Time) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	for _, w := range v.history {
		if !w.at.Before(since) {
			fmt.Fprintf(&b, "  +%s serial %s, bytes %v\n", w.at.Sub(since).Round(time.Millisecond), w.serial, w.sizes)
		}
	}
	return b.String()
}

// state returns the digest of the data last written and when it was
// written, and the last error.
func (v *secretVolume) state() (digest string, updated time.Time, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.digest, v.updated, v.lastErr
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
