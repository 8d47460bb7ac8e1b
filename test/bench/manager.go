package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/test/localrun"
)

// startup is how long the manager took from process start to each sign of
// readiness.
type startup struct {
	// ReadyzSeconds: /readyz answers 200.
	ReadyzSeconds float64 `json:"readyzSeconds"`
	// WebhookSeconds: the webhook server accepts TLS connections.
	WebhookSeconds float64 `json:"webhookSeconds"`
	// CachesSyncedSeconds: the Database controller logged "Starting
	// workers", which it does once every watched cache has synced.
	CachesSyncedSeconds float64 `json:"cachesSyncedSeconds"`
	// ReadySeconds is the latest of the three.
	ReadySeconds float64 `json:"readySeconds"`
	// Databases present at start.
	Databases int `json:"databases"`
}

// startManager starts the manager and measures its start-up by polling,
// every 10ms, its readiness probe, its webhook port and its log.
func (b *bench) startManager(ctx context.Context) (startup, error) {
	var logOffset int64
	if st, err := os.Stat(b.mgrOpts.LogFile); err == nil {
		logOffset = st.Size()
	}
	var (
		mu     sync.Mutex
		result startup
	)
	pollCtx, cancelPoll := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelPoll()
	began := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		probe := &http.Client{Timeout: time.Second}
		readyz, webhook, synced := false, false, false
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !readyz || !webhook || !synced {
			select {
			case <-pollCtx.Done():
				return
			case <-tick.C:
			}
			now := time.Since(began).Seconds()
			if !readyz && probeOK(pollCtx, probe, "http://127.0.0.1:"+strconv.Itoa(b.mgrOpts.ProbePort)+"/readyz") {
				readyz = true
				mu.Lock()
				result.ReadyzSeconds = now
				mu.Unlock()
			}
			if !webhook {
				conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(b.mgrOpts.WebhookPort), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // only probing that the server is up
				if err == nil {
					_ = conn.Close()
					webhook = true
					mu.Lock()
					result.WebhookSeconds = now
					mu.Unlock()
				}
			}
			if !synced && logContains(b.mgrOpts.LogFile, logOffset, []byte(`"Starting workers"`)) {
				synced = true
				mu.Lock()
				result.CachesSyncedSeconds = now
				mu.Unlock()
			}
		}
	}()
	m, err := localrun.StartManager(ctx, b.mgrOpts)
	if err != nil {
		return startup{}, err
	}
	b.mgr = m
	select {
	case <-done:
	case <-ctx.Done():
		return startup{}, ctx.Err()
	}
	if pollCtx.Err() != nil {
		return startup{}, fmt.Errorf("the manager did not become ready within 2 minutes; see %s", b.mgrOpts.LogFile)
	}
	mu.Lock()
	defer mu.Unlock()
	result.ReadySeconds = max(result.ReadyzSeconds, result.WebhookSeconds, result.CachesSyncedSeconds)
	return result, nil
}

func probeOK(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logContains reports whether the file, from offset on, contains s.
func logContains(file string, offset int64, s []byte) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false
	}
	data, err := io.ReadAll(f)
	return err == nil && bytes.Contains(data, s)
}

// memory is the manager's memory at one moment.
type memory struct {
	// RSSBytes is VmRSS from /proc/PID/status, read first; RSSAnonBytes
	// and RSSFileBytes are its anonymous and file-backed (the binary's
	// code and data) parts.
	RSSBytes     int64 `json:"rssBytes"`
	RSSAnonBytes int64 `json:"rssAnonBytes"`
	RSSFileBytes int64 `json:"rssFileBytes"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes right after a
	// garbage collection forced through pprof (/debug/pprof/heap?gc=1),
	// so that it counts live objects rather than garbage not yet collected.
	HeapInuseBytes int64 `json:"heapInuseBytes"`
	// HeapInuseBeforeGCBytes is go_memstats_heap_inuse_bytes before that
	// collection.
	HeapInuseBeforeGCBytes int64 `json:"heapInuseBeforeGCBytes"`
}

// measureMemory reads the manager's RSS, then its heap in use before and
// after a forced garbage collection.
func (b *bench) measureMemory(ctx context.Context) (memory, error) {
	var m memory
	pm, err := readProcMemory(b.mgr.PID())
	if err != nil {
		return m, err
	}
	m.RSSBytes, m.RSSAnonBytes, m.RSSFileBytes = pm.rss, pm.anon, pm.file
	before, err := b.managerMetrics(ctx)
	if err != nil {
		return m, err
	}
	m.HeapInuseBeforeGCBytes = int64(before.sum("go_memstats_heap_inuse_bytes", nil))
	if err := b.pprof(ctx, "/debug/pprof/heap?gc=1", io.Discard); err != nil {
		return m, err
	}
	after, err := b.managerMetrics(ctx)
	if err != nil {
		return m, err
	}
	m.HeapInuseBytes = int64(after.sum("go_memstats_heap_inuse_bytes", nil))
	return m, nil
}

// pprof fetches a path of the manager's pprof server into w.
func (b *bench) pprof(ctx context.Context, path string, w io.Writer) error {
	client := &http.Client{Timeout: 10 * time.Minute} // a CPU profile takes up to five
	return fetchTo(ctx, client, "http://"+b.pprofAddr+path, "pprof "+path, w)
}

// saveProfile writes a pprof profile of the manager to -profile-dir, when
// set.
func (b *bench) saveProfile(ctx context.Context, path, name string) {
	b.saveProfileOf(ctx, b.pprof, path, name)
}

// saveAPIServerProfile writes a pprof profile of the API server to
// -profile-dir, when set (the cluster then serves it).
func (b *bench) saveAPIServerProfile(ctx context.Context, path, name string) {
	b.saveProfileOf(ctx, b.apiPprof, path, name)
}

// apiPprof fetches a path of the API server's /debug/pprof into w.
func (b *bench) apiPprof(ctx context.Context, path string, w io.Writer) error {
	cfg := rest.CopyConfig(b.cfg)
	cfg.Timeout = 10 * time.Minute // a CPU profile takes minutes
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return fetchTo(ctx, client, strings.TrimRight(cfg.Host, "/")+path, "API server pprof "+path, w)
}

// fetchTo GETs url with client into w; what names it in errors.
func fetchTo(ctx context.Context, client *http.Client, url, what string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// saveProfileOf writes what fetch returns for path to name in -profile-dir,
// when set.
func (b *bench) saveProfileOf(ctx context.Context, fetch func(context.Context, string, io.Writer) error, path, name string) {
	if b.opts.profileDir == "" {
		return
	}
	if err := os.MkdirAll(b.opts.profileDir, 0o755); err != nil {
		b.logf("profile %s: %v", name, err)
		return
	}
	file := filepath.Join(b.opts.profileDir, name)
	f, err := os.Create(file)
	if err != nil {
		b.logf("profile %s: %v", name, err)
		return
	}
	defer f.Close()
	if err := fetch(ctx, path, f); err != nil {
		b.logf("profile %s: %v", name, err)
		return
	}
	b.logf("profile written to %s", file)
}

// mutatingMethods are the HTTP methods that change objects.
var mutatingMethods = []string{"POST", "PUT", "PATCH", "DELETE"}

// managerRequests returns the manager's own API requests by HTTP method,
// from client-go's rest_client_requests_total.
func managerRequests(m metrics) map[string]float64 {
	return m.by("rest_client_requests_total", nil, func(l map[string]string) string { return l["method"] })
}

func sumMethods(by map[string]float64, methods ...string) float64 {
	total := 0.0
	for _, m := range methods {
		total += by[m]
	}
	return total
}

// waitQuiet waits until the manager's work queue is empty and it made no
// API request for quietFor, or until limit; it returns how long it waited.
func (b *bench) waitQuiet(ctx context.Context, quietFor, limit time.Duration) (time.Duration, error) {
	began := time.Now()
	var last float64 = -1
	quietSince := time.Now()
	for time.Since(began) < limit {
		m, err := b.managerMetrics(ctx)
		if err != nil {
			return 0, err
		}
		reqs := m.sum("rest_client_requests_total", nil)
		depth := m.sum("workqueue_depth", labelIs("name", "database"))
		active := m.sum("controller_runtime_active_workers", labelIs("controller", "database"))
		if reqs != last || depth > 0 || active > 0 {
			last = reqs
			quietSince = time.Now()
		} else if time.Since(quietSince) >= quietFor {
			return time.Since(began), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	b.logf("the manager was not quiet for %s within %s", quietFor, limit)
	return time.Since(began), nil
}
