package realnode

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// previousRelease is the last commit before the data path's security: a
// Database it made has the application user as its bootstrap superuser,
// the agents' bearer token and the replication password in the
// application's credentials Secret, and agents that speak plain HTTP.
const previousRelease = "36851ef5ff4fc5afb32105659a1e095b5e4acb0f"

// release is an earlier release's manager binary and instance image.
type release struct {
	manager           string
	instanceImage     string
	instanceImageFile string
}

// buildRelease builds the manager and the instance image of commit from
// this repository's history, once: they are cached under the cache
// directory by what decides them, the commit and the Go toolchain, and a
// later run reuses them.
func buildRelease(t testing.TB, commit string) release {
	t.Helper()
	cache := filepath.Join(devcluster.CacheDir(), "releases", commit+"-"+runtime.Version())
	if r, err := readRelease(cache); err == nil {
		t.Logf("previous release %.12s reused from %s: instance image %s", commit, cache, r.instanceImage)
		return r
	}
	if err := exec.Command("git", "-C", testenv.ProjectRoot(), "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("the previous release's commit %.12s is not in this clone's history (a shallow clone?): the upgrade test builds it; run `git fetch --unshallow`", commit)
	}
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		t.Fatal(err)
	}
	// Built beside the cache entry and renamed into place, so that an
	// interrupted build never looks complete. The sources stay in t's
	// temporary directory.
	dir, err := os.MkdirTemp(filepath.Dir(cache), ".build-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := filepath.Join(t.TempDir(), "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("git", "-C", testenv.ProjectRoot(), "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var stderr strings.Builder
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (the upgrade test needs the previous release in this clone's history): %v: %s", commit, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v: %s", err, stderr.String())
	}
	r := release{manager: filepath.Join(dir, "dbkeeper")}
	run := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s in the previous release: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	began := time.Now()
	run("go", "build", "-o", r.manager, "./cmd/dbkeeper")
	images := filepath.Join(dir, "images")
	run("bash", "hack/engine-images.sh", images, "dbkeeper-instance")
	if _, err := readRelease(dir); err != nil {
		t.Fatal(err)
	}
	_ = os.RemoveAll(cache) // an incomplete entry
	if err := os.Rename(dir, cache); err != nil {
		t.Fatal(err)
	}
	r, err = readRelease(cache)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("previous release %.12s built in %.0fs into %s: instance image %s", commit, time.Since(began).Seconds(), cache, r.instanceImage)
	return r
}

// readRelease reads a release built into dir: its manager binary and the
// instance image of its images.txt, whose archive is looked up in dir (the
// list names it where it was built).
func readRelease(dir string) (release, error) {
	r := release{manager: filepath.Join(dir, "dbkeeper")}
	if _, err := os.Stat(r.manager); err != nil {
		return release{}, err
	}
	images := filepath.Join(dir, "images")
	f, err := os.Open(filepath.Join(images, devcluster.ImagesListFile))
	if err != nil {
		return release{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, file, ok := strings.Cut(strings.TrimSpace(sc.Text()), " "); ok && strings.HasPrefix(name, devcluster.InstanceImageRepository+":") {
			r.instanceImage, r.instanceImageFile = name, filepath.Join(images, filepath.Base(file))
		}
	}
	if err := sc.Err(); err != nil {
		return release{}, err
	}
	if r.instanceImage == "" {
		return release{}, fmt.Errorf("the previous release's engine-images.sh listed no instance image in %s", images)
	}
	if _, err := os.Stat(r.instanceImageFile); err != nil {
		return release{}, err
	}
	return r, nil
}

// testUpgrade makes a Database with the previous release, then runs this
// one: the Database converges to the new layout, and its clients still log
// in with the password they had.
func (s *suite) testUpgrade(t subtest) {
	const name = "legacy"
	ctx := context.Background()
	pgImage := s.image("dbkeeper.local/postgres:17.")
	rel := buildRelease(t, previousRelease)
	if err := s.env.Cluster.ImportImage(ctx, rel.instanceImage, rel.instanceImageFile); err != nil {
		t.Fatal(err)
	}
	newManager := s.managerOptions(s.env.Binary, s.env.Cluster.InstanceImage(), s.logFile)
	previous := s.managerOptions(rel.manager, rel.instanceImage, filepath.Join(s.runDir, "manager-previous.log"))
	previous.PreviousRelease = true
	upgraded := false
	// Whatever happens, the rest of the suite runs this release: also when
	// the previous release's manager does not start (restartManager has
	// stopped this release's by then).
	defer func() {
		if !upgraded {
			s.restartManager(t, newManager)
		}
	}()
	s.restartManager(t, previous)

	var old map[string]string
	s.run(t.T, "the previous release makes a replicated Database", name, func(t subtest) {
		s.apply(strings.Replace(database(name, "postgres", majorOf(pgImage), pgImage, "Delete", nil),
			"spec:\n", "spec:\n  replicas: 2\n", 1))
		s.waitReady(name, 5*time.Minute)
		old = s.secret(name + "-credentials")
		if old["agent-token"] == "" || old["replication-password"] == "" {
			t.Fatalf("the previous release's credentials Secret has keys %v, want agent-token and replication-password in it", keys(old))
		}
		rw := s.pgTarget(name, name)
		rw.exec(t, "CREATE TABLE ledger (n int PRIMARY KEY)")
		rw.exec(t, "INSERT INTO ledger SELECT generate_series(1, 10)")
		if n, err := rw.query("SELECT count(*) FROM pg_roles WHERE rolname = current_user AND rolsuper"); err != nil || n != 1 {
			t.Fatalf("the previous release's application user is a superuser: count %d, %v; the test does not start from the old layout", n, err)
		}
	})
	if t.Failed() {
		return
	}

	s.run(t.T, "this release converges it to the new layout, and clients log in with the same password", name, func(t subtest) {
		s.restartManager(t, newManager)
		upgraded = true
		testenv.Eventually(t, 6*time.Minute, "every pod on this release's instance image, the Database Ready", func() string {
			for i := range 2 {
				pod := fmt.Sprintf("%s-%d", name, i)
				img, err := s.kubectl("get", "pod", "-n", ns, pod, "-o", "jsonpath={.spec.initContainers[0].image}")
				if err != nil || img != s.env.Cluster.InstanceImage() {
					return fmt.Sprintf("%s runs instance image %q (%v)", pod, img, err)
				}
			}
			if c := s.condition(name, "Ready"); c.Status != "True" {
				return "Ready=" + string(c.Status) + ": " + c.Message
			}
			return ""
		})
		testenv.Eventually(t, 2*time.Minute, "the credentials Secret without the agents' token and the replication password", func() string {
			now := s.secret(name + "-credentials")
			for _, k := range []string{"agent-token", "replication-password"} {
				if now[k] != "" {
					return "it still has " + k
				}
			}
			if now["password"] != old["password"] {
				return "the application's password changed"
			}
			return ""
		})
		inst := s.secret(desired.InstanceSecretName(s.database(t, name)))
		if inst[desired.SecretKeyInstanceReplicationPassword] != old["replication-password"] {
			t.Errorf("the replication password was not carried over to the instance Secret")
		}
		rw := s.pgTarget(name, name)
		// The client Service follows the primary's label, which the last
		// step of the rolling update moves.
		testenv.Eventually(t, time.Minute, "the 10 rows, read with the old password", func() string {
			if n, err := rw.total(); err != nil || n != 10 {
				return fmt.Sprintf("%d rows, %v", n, err)
			}
			return ""
		})
		rw.exec(t, "INSERT INTO ledger VALUES (11)")
		if n, err := rw.query("SELECT count(*) FROM pg_roles WHERE rolname = current_user AND NOT rolsuper"); err != nil || n != 1 {
			t.Errorf("the application user is still a superuser after the upgrade: %d, %v", n, err)
		}
		if err := rw.execErr("ALTER SYSTEM SET work_mem = '8MB'"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("ALTER SYSTEM as the application user after the upgrade: %v, want permission denied", err)
		}
	})
	s.mustKubectl("delete", "database", "-n", ns, name, "--wait=true", "--timeout=120s")
}

func keys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
