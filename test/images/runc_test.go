package images

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/desired"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/test/images/ociimage"
)

// password is the Secret's password in the test: quotes, a backslash, a
// dollar and a space check that no entrypoint quoting loses it.
const password = `p'a"ss \w$rd 1`

// engineImages reads images.txt: image name to archive, for the engine
// images (not pause, not the instance image).
func engineImages(t *testing.T) map[string]string {
	t.Helper()
	list := filepath.Join(devcluster.DefaultImagesDir(), "images.txt")
	f, err := os.Open(list)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no engine images: %s is missing; build them with `make engine-images`", list)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, file, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("%s: line %q: want '<name> <file>'", list, sc.Text())
		}
		// Not the backup sidecar's image either: it runs the agent's
		// binary from the pod's shared volume (TestObjectStoreOnRealNode
		// and test/realnode run it in pods).
		if !strings.Contains(name, "/pause:") && !strings.HasPrefix(name, devcluster.InstanceImageRepository+":") &&
			!strings.HasPrefix(name, devcluster.ManagerImageRepository+":") && !strings.HasPrefix(name, devcluster.BackupImageRepository+":") {
			out[name] = file
		}
	}
	if len(out) == 0 {
		t.Skipf("no engine images listed in %s; build them with `make engine-images`", list)
	}
	return out
}

// engineOf says which dbkeeper engine an image serves.
func engineOf(name string) dbv1.Engine {
	if strings.Contains(name, "/mariadb:") || strings.Contains(name, "/mysql:") {
		return dbv1.EngineMySQL
	}
	return dbv1.EnginePostgres
}

// TestEngineImagesWithRunc runs every engine image listed in images.txt with
// runc as the StatefulSet dbkeeper builds would run it: the server starts
// from an empty volume, the probe command passes, the user logs in over TCP
// with the Secret's password (and not with another), spec.parameters reach
// the server, and a restart on the same volume keeps the data without
// initializing again.
func TestEngineImagesWithRunc(t *testing.T) {
	if testing.Short() {
		t.Skip("runs database servers: not in -short")
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip("runc is not installed: apt-get install -y runc (.ci/run does)")
	}
	if os.Geteuid() != 0 {
		t.Skip("running containers with runc needs root")
	}
	images := engineImages(t)
	for _, name := range slices.Sorted(maps.Keys(images)) {
		t.Run(name, func(t *testing.T) {
			testImage(t, runc, name, images[name])
		})
	}
}

func testImage(t *testing.T, runc, name, archive string) {
	engine := engineOf(name)
	info, _ := catalog.LookupEngine(engine)
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop"},
		Spec: dbv1.DatabaseSpec{
			Engine: engine, Image: name, DatabaseName: "app", Username: "app", Port: ptr.To(info.Port),
			Parameters: map[string]string{"max_connections": "42"},
		},
	}
	c := desired.StatefulSet(db, desired.Options{InstanceImage: desired.DefaultInstanceImage}).Spec.Template.Spec.Containers[0]

	work := t.TempDir()
	rootfs := filepath.Join(work, "rootfs")
	start := time.Now()
	img, err := ociimage.Unpack(archive, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unpacked %s in %v", name, time.Since(start).Round(time.Millisecond))

	// An empty password in the Secret: the entrypoint refuses to initialize
	// and names the empty file (postgres) or the variable to set (mysql).
	bad := newContainer(t, runc, filepath.Join(work, "empty-password"), rootfs, img, db, "")
	badLog := filepath.Join(work, "empty-password.log")
	bad.start(badLog)
	bad.waitStopped(30 * time.Second)
	want := map[dbv1.Engine]string{dbv1.EnginePostgres: "superuser password is not specified", dbv1.EngineMySQL: "set exactly one of MYSQL_ROOT_PASSWORD"}[engine]
	if got := bad.lastLog(); !strings.Contains(got, want) {
		t.Errorf("with an empty password the log does not say %q:\n%s", want, got)
	}
	bad.delete()

	ct := newContainer(t, runc, filepath.Join(work, "pod"), rootfs, img, db, password)
	// The container runs the image's entrypoint with the server's flags,
	// as the instance agent does for postgres; the agent itself, which
	// postgres's probes ask, is not run here, so postgres is probed with
	// the image's own pg_isready.
	probe := []string{"pg_isready", "--host=127.0.0.1", "--port=" + strconv.Itoa(int(info.Port)), "--username=app", "--dbname=app"}
	if c.StartupProbe != nil && c.StartupProbe.Exec != nil {
		probe = c.StartupProbe.Exec.Command
	}

	// First start: an empty volume is initialized.
	log1 := filepath.Join(work, "first.log")
	ct.start(log1)
	took := ct.waitFor(probe, 3*time.Minute)
	t.Logf("%s: first start (with initialization) answered the probe after %v", name, took.Round(100*time.Millisecond))

	cl := client{ct: ct, engine: engine, port: strconv.Itoa(int(info.Port))}
	out := cl.sql(t, "CREATE TABLE kept (n integer); INSERT INTO kept VALUES (1), (2);")
	t.Logf("created a table: %s", strings.TrimSpace(out))
	if got := strings.TrimSpace(cl.sql(t, cl.showMaxConnections())); got != "42" {
		t.Errorf("max_connections = %q, want 42 from spec.parameters", got)
	}
	_, tag, _ := strings.Cut(name[strings.LastIndex(name, "/"):], ":")
	if got := strings.TrimSpace(cl.sql(t, cl.showVersion())); !strings.HasPrefix(got, tag) {
		t.Errorf("the server's version is %q, want the image tag %s", got, tag)
	}
	out, err = cl.try("wrong password", "SELECT 1")
	switch {
	case engine == dbv1.EnginePostgres && err != nil:
		// The image alone is the official image: initdb's defaults trust
		// every loopback address. The instance agent, which does not run
		// here, replaces that pg_hba.conf before the server's first start
		// (internal/instance/agent TestAgentAdmitsNoSuperuserOverTCP).
		t.Errorf("a wrong password over 127.0.0.1 was refused (%v: %s): the official image trusts loopback, and so must this one", err, out)
	case engine == dbv1.EngineMySQL && err == nil:
		t.Errorf("logging in over TCP with a wrong password succeeded: %s", out)
	case engine == dbv1.EngineMySQL && !strings.Contains(out, "Access denied"):
		t.Errorf("logging in with a wrong password failed for another reason than the password: %v: %s", err, out)
	}
	if engine == dbv1.EngineMySQL {
		// MYSQL_ROOT_HOST=localhost: the Secret's password must not make
		// root reachable over the network.
		out, err := ct.execErr(nil, "mariadb", "--host=127.0.0.1", "--port="+cl.port, "--user=root", "--password="+password, "--execute=SELECT 1")
		if err == nil {
			t.Errorf("root logged in over TCP with the Secret's password: %s", out)
		}
	}
	if got := ct.exec(nil, "id", "-u"); strings.TrimSpace(got) != "999" {
		t.Errorf("the container runs as uid %q, want 999", got)
	}
	if out, err := ct.execErr(nil, "touch", "/usr/written"); err == nil {
		t.Errorf("the root file system is writable: %s", out)
	}

	// Stop with the image's stop signal and start again on the same volume.
	ct.stop()
	log2 := filepath.Join(work, "second.log")
	ct.start(log2)
	took = ct.waitFor(probe, 2*time.Minute)
	t.Logf("%s: restart on existing data answered the probe after %v", name, took.Round(100*time.Millisecond))
	if got := strings.TrimSpace(cl.sql(t, "SELECT count(*) FROM kept;")); got != "2" {
		t.Errorf("after a restart, the table has %q rows, want 2", got)
	}
	second, _ := os.ReadFile(log2)
	if !strings.Contains(string(second), "without initialization") || strings.Contains(string(second), "[entrypoint] initializing") {
		t.Errorf("the restart did not start without initialization; its log:\n%s", second)
	}
	ct.stop()
}

// newContainer prepares, under work, the volumes and the runc bundle of the
// container of db's StatefulSet, as the kubelet would run it from the image
// unpacked in rootfs, with secret as the value of every Secret reference.
func newContainer(t *testing.T, runc, work, rootfs string, img ociimage.Unpacked, db *dbv1.Database, secret string) *container {
	t.Helper()
	pod := desired.StatefulSet(db, desired.Options{InstanceImage: desired.DefaultInstanceImage}).Spec.Template.Spec
	c := pod.Containers[0]
	// The volumes as the kubelet leaves them with fsGroup: a directory
	// owned by root and group fsGroup, setgid, group-writable (a fresh
	// persistent volume) or writable by all (an emptyDir).
	fsGroup := int(*pod.SecurityContext.FSGroup)
	volume := func(name string, mode os.FileMode) string {
		dir := filepath.Join(work, "volumes", name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 0, fsGroup); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	pc := podContainer{
		args:     append(append([]string{}, img.Config.Entrypoint...), c.Args...),
		env:      containerEnv(img.Config.Env, c.Env, secret),
		uid:      *pod.SecurityContext.RunAsUser,
		gid:      *pod.SecurityContext.RunAsGroup,
		fsGroup:  *pod.SecurityContext.FSGroup,
		readOnly: *c.SecurityContext.ReadOnlyRootFilesystem,
		mounts:   map[string]string{},
	}
	for _, m := range c.VolumeMounts {
		mode := os.FileMode(0o777)
		if *m.Name == desired.VolumeData {
			mode = 0o775
		}
		pc.mounts[*m.MountPath] = volume(*m.Name, mode)
		if *m.Name == desired.VolumeSecrets {
			// The projected volume: every file holds secret, readable
			// by the group fsGroup only.
			for _, src := range volumeNamed(pod.Volumes, desired.VolumeSecrets).Projected.Sources {
				for _, item := range src.Secret.Items {
					file := filepath.Join(pc.mounts[*m.MountPath], *item.Path)
					if err := os.WriteFile(file, []byte(secret), 0o440); err != nil {
						t.Fatal(err)
					}
					if err := os.Chown(file, 0, fsGroup); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	bundle := filepath.Join(work, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeBundle(bundle, bundleSpec(pc, rootfs, desired.StatefulSetName(db)+"-0")); err != nil {
		t.Fatal(err)
	}
	ct := &container{
		t: t, runc: runc, state: filepath.Join(work, "state"), bundle: bundle,
		id:         fmt.Sprintf("dbkeeper-images-test-%s-%d", db.Spec.Engine, os.Getpid()),
		stopSignal: img.Config.StopSignal,
	}
	t.Cleanup(ct.remove)
	return ct
}

// client runs the engine's own command-line client in the container,
// connecting over TCP to 127.0.0.1 as the Database's user.
type client struct {
	ct     *container
	engine dbv1.Engine
	port   string
}

func (c client) showMaxConnections() string {
	if c.engine == dbv1.EngineMySQL {
		return "SELECT @@max_connections;"
	}
	return "SHOW max_connections;"
}

func (c client) showVersion() string {
	if c.engine == dbv1.EngineMySQL {
		return "SELECT VERSION();"
	}
	return "SHOW server_version;"
}

func (c client) try(pw, query string) (string, error) {
	if c.engine == dbv1.EngineMySQL {
		return c.ct.execErr(nil, "mariadb", "--host=127.0.0.1", "--port="+c.port, "--user=app", "--password="+pw,
			"--batch", "--skip-column-names", "--database=app", "--execute="+query)
	}
	// The superuser: the instance agent, which makes the application's
	// user, does not run here.
	return c.ct.execErr([]string{"PGPASSWORD=" + pw, "PGCONNECT_TIMEOUT=5"}, "psql", "--no-psqlrc", "--host=127.0.0.1",
		"--port="+c.port, "--username="+desired.SuperUser, "--dbname=app", "--tuples-only", "--no-align", "--set=ON_ERROR_STOP=1", "--command="+query)
}

func (c client) sql(t *testing.T, query string) string {
	t.Helper()
	out, err := c.try(password, query)
	if err != nil {
		t.Fatalf("%s: %v\n%s\ncontainer log:\n%s", query, err, out, c.ct.lastLog())
	}
	return out
}

// container drives one runc container, with its own runc state directory
// so that nothing else on the machine sees it.
type container struct {
	t                             *testing.T
	runc, state, bundle, id, logf string
	stopSignal                    string
	running                       bool
}

func (c *container) runcCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.runc, append([]string{"--root", c.state}, args...)...)
}

// start runs the container detached, its output going to logFile.
func (c *container) start(logFile string) {
	c.t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	c.logf = logFile
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.runcCmd(ctx, "run", "--detach", "--bundle", c.bundle, c.id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, f, f
	if err := cmd.Run(); err != nil {
		data, _ := os.ReadFile(logFile)
		c.t.Fatalf("runc run %s: %v\n%s", c.id, err, data)
	}
	c.running = true
}

func (c *container) lastLog() string {
	data, _ := os.ReadFile(c.logf)
	return string(data)
}

// exec runs a command in the container with the container's user and env,
// plus env, and fails the test when it fails.
func (c *container) exec(env []string, args ...string) string {
	c.t.Helper()
	out, err := c.execErr(env, args...)
	if err != nil {
		c.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *container) execErr(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := make([]string, 0, 2+2*len(env)+len(args))
	a = append(a, "exec")
	for _, e := range env {
		a = append(a, "--env", e)
	}
	a = append(a, c.id)
	cmd := c.runcCmd(ctx, append(a, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// waitFor runs the probe command until it passes and returns how long
// that took; it fails the test with the container's log after timeout or
// when the container stops.
func (c *container) waitFor(probe []string, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if _, err := c.execErr(nil, probe...); err == nil {
			return time.Since(start)
		}
		if st := c.status(); st != "running" && st != "created" {
			c.t.Fatalf("the container is %s before its probe passed; its log:\n%s", st, c.lastLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("the probe %q did not pass within %v; the container's log:\n%s", probe, timeout, c.lastLog())
	return 0
}

func (c *container) status() string {
	out, err := c.runcCmd(context.Background(), "state", c.id).Output()
	if err != nil {
		return "gone"
	}
	_, rest, _ := strings.Cut(string(out), `"status": "`)
	st, _, _ := strings.Cut(rest, `"`)
	return st
}

// stop sends the image's stop signal, waits up to the pod's grace period
// (30 s) for the server to exit, and deletes the container.
func (c *container) stop() {
	c.t.Helper()
	sig := strings.TrimPrefix(c.stopSignal, "SIG")
	if sig == "" {
		sig = "TERM"
	}
	if out, err := c.runcCmd(context.Background(), "kill", c.id, sig).CombinedOutput(); err != nil {
		c.t.Fatalf("runc kill %s %s: %v: %s", c.id, sig, err, out)
	}
	c.waitStopped(30 * time.Second)
	c.delete()
}

// waitStopped waits for the container's process to exit.
func (c *container) waitStopped(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for c.status() == "running" {
		if time.Now().After(deadline) {
			c.t.Fatalf("the container did not stop within %v; its log:\n%s", timeout, c.lastLog())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// delete deletes the stopped container.
func (c *container) delete() {
	c.t.Helper()
	if out, err := c.runcCmd(context.Background(), "delete", c.id).CombinedOutput(); err != nil {
		c.t.Fatalf("runc delete %s: %v: %s", c.id, err, out)
	}
	c.running = false
}

// remove force-deletes the container if a failed test left it running.
func (c *container) remove() {
	if !c.running {
		return
	}
	if out, err := c.runcCmd(context.Background(), "delete", "--force", c.id).CombinedOutput(); err != nil {
		c.t.Errorf("cleaning up container %s: %v: %s", c.id, err, out)
	}
}

// volumeNamed returns the volume of that name.
func volumeNamed(volumes []corev1ac.VolumeApplyConfiguration, name string) *corev1ac.VolumeApplyConfiguration {
	for i := range volumes {
		if *volumes[i].Name == name {
			return &volumes[i]
		}
	}
	return nil
}
