package userpath

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/e2eharness"
	"github.com/dbkeeper/dbkeeper/internal/test/objectstore"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// hostPackages are the Debian packages hack/host-packages.sh installs, with
// the programs (on PATH) and files (under the root directory) by which it
// finds each one: a fresh machine has none of them.
var hostPackages = map[string]struct{ programs, files []string }{
	"runc":                        {programs: []string{"runc"}},
	"containernetworking-plugins": {files: []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local"}},
	"iptables":                    {programs: []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore", "iptables-legacy", "iptables-nft"}},
	"conntrack":                   {programs: []string{"conntrack"}},
	"iproute2":                    {programs: []string{"ip"}},
	"mmdebstrap":                  {programs: []string{"mmdebstrap"}},
	"postgresql-15":               {files: []string{"/usr/lib/postgresql/15/bin/postgres"}},
	"barman-cli-cloud":            {programs: []string{"barman-cloud-backup", "barman-cloud-wal-archive", "barman-cloud-restore", "barman-cloud-wal-restore"}},
	"prometheus":                  {programs: []string{"prometheus", "promtool"}},
}

// freshMachine is an environment in which the machine looks fresh: a PATH
// of every program of this machine's PATH but the host packages' (and
// apt-get, id and go, which it replaces), a root directory without the
// packages' files, and an empty cache directory. Its apt-get records its
// calls and "installs" a package by linking this machine's programs and
// files of it into the PATH and the root directory; its go, asked to build
// one of the cached tools (the Kubernetes, node, backup and cert-manager
// binaries, each built as DIR/.NAME.tmp), links the binary this machine's
// cache holds instead of building it for minutes. The engine images are
// linked from this machine's cache: building them from Debian packages is
// what make engine-images's own tests prove.
type freshMachine struct {
	t                        *testing.T
	bin, root, cache, aptLog string
}

func newFreshMachine(t *testing.T, uid int, aptUpdate string) *freshMachine {
	t.Helper()
	dir := t.TempDir()
	m := &freshMachine{t: t, bin: filepath.Join(dir, "bin"), root: filepath.Join(dir, "root"), cache: filepath.Join(dir, "cache"), aptLog: filepath.Join(dir, "apt.log")}
	for _, d := range []string{m.bin, m.root, m.cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hidden := map[string]bool{"apt-get": true, "id": true, "go": true}
	for _, p := range hostPackages {
		for _, prog := range p.programs {
			hidden[prog] = true
		}
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if hidden[e.Name()] {
				continue
			}
			link := filepath.Join(m.bin, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // the first on PATH wins, as for the shell
			}
			if err := os.Symlink(filepath.Join(d, e.Name()), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	warm := []string{testenv.BinDir(), devcluster.DefaultNodeBinDir(), objectstore.BinDir(), e2eharness.RequireCertManager(t)}
	m.script("id", fmt.Sprintf("#!/bin/sh\necho %d\n", uid))
	m.script("go", fmt.Sprintf(`#!/bin/bash
# go, with the build of a cached tool (-o DIR/.NAME.tmp) replaced by a link
# to this machine's NAME.
if [[ $1 == build ]]; then
	out="" prev=""
	for a in "$@"; do [[ $prev == -o ]] && out=$a; prev=$a; done
	name=$(basename "$out")
	if [[ $name == .*.tmp ]]; then
		name=${name#.}
		name=${name%%.tmp}
		for d in %s; do
			if [[ -x $d/$name ]]; then
				ln -sf "$d/$name" "$out"
				exit 0
			fi
		done
	fi
fi
exec %s "$@"
`, strings.Join(warm, " "), goBin))
	// apt-get: update answers as told; install links each package's
	// programs and files from this machine.
	var install strings.Builder
	for name, p := range hostPackages {
		fmt.Fprintf(&install, "\t%s)\n", name)
		for _, prog := range p.programs {
			if path, err := exec.LookPath(prog); err == nil {
				fmt.Fprintf(&install, "\t\tln -sf %s %s/%s\n", path, m.bin, prog)
			}
		}
		for _, f := range p.files {
			fmt.Fprintf(&install, "\t\tmkdir -p %s%s && ln -sf %s %s%s\n", m.root, filepath.Dir(f), f, m.root, f)
		}
		fmt.Fprintf(&install, "\t\t;;\n")
	}
	// An apt-get with indexes of its own (engine-images.sh's Debian 13
	// indexes, -o Dir::State::Lists=...) changes nothing of the machine's
	// packages and runs for real.
	aptGet, err := exec.LookPath("apt-get")
	if err != nil {
		t.Fatal(err)
	}
	m.script("apt-get", fmt.Sprintf(`#!/bin/bash
if [[ $1 == -o && " $* " == *" Dir::State::Lists="* ]]; then
	exec %s "$@"
fi
echo "apt-get $*" >>%s
case $1 in
update)
%s
	;;
install)
	for p in "$@"; do
		case $p in
%s		esac
	done
	;;
esac
`, aptGet, m.aptLog, aptUpdate, install.String()))
	return m
}

func (m *freshMachine) script(name, text string) {
	m.t.Helper()
	if err := os.WriteFile(filepath.Join(m.bin, name), []byte(text), 0o755); err != nil {
		m.t.Fatal(err)
	}
}

// make runs make with args in the checkout, in the fresh machine's
// environment, and returns its output.
func (m *freshMachine) make(timeout time.Duration, args ...string) (string, error) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "CACHE_DIR=" + m.cache}, args...)...)
	cmd.Dir = testenv.ProjectRoot()
	env := make([]string, 0, len(userEnv())+2)
	env = append(env, "PATH="+m.bin, "DBKEEPER_HOST_ROOT="+m.root)
	for _, kv := range userEnv() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "KUBEBUILDER_ASSETS", "CERT_MANAGER_ASSETS", "DBKEEPER_NODE_TOOLS", "DBKEEPER_BACKUP_TOOLS", "ENGINE_IMAGES_DIR":
			continue // what the Makefile derives from CACHE_DIR
		}
		env = append(env, kv)
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (m *freshMachine) aptCalls() []string {
	data, err := os.ReadFile(m.aptLog)
	if err != nil && !os.IsNotExist(err) {
		m.t.Fatal(err)
	}
	var calls []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line != "" {
			calls = append(calls, strings.TrimPrefix(line, "apt-get "))
		}
	}
	return calls
}

// requireWarmCache skips the test where this machine's cache lacks what
// the fresh machine's builds are stubbed with (make test builds it first).
func requireWarmCache(t *testing.T) {
	t.Helper()
	if err := devcluster.CheckBinaries(testenv.BinDir()); err != nil {
		t.Skipf("the stubbed builds link this machine's binaries: %v", err)
	}
	e2eharness.RequireCertManager(t)
	for _, d := range []string{devcluster.DefaultNodeBinDir(), objectstore.BinDir()} {
		if _, err := os.Stat(d); err != nil {
			t.Skipf("the stubbed builds link this machine's binaries (make test builds them first): %v", err)
		}
	}
	if _, err := devcluster.ReadImages(devcluster.DefaultImagesDir()); err != nil {
		t.Skipf("the fresh machine's images are linked from this machine's (make engine-images): %v", err)
	}
}

// TestREADMEFreshMachine follows "The two commands" on a machine that
// looks fresh: without root, the README's commands stop at once with the
// command that installs the Debian packages, building nothing first; as
// root, they install the packages (after an apt-get update that must
// succeed) and build every cache, in order, saying how long each step took;
// an apt-get update that cannot refresh the indexes stops them, with apt's
// words.
func TestREADMEFreshMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make")
	}
	if os.Geteuid() != 0 {
		t.Skip("as root, the setup installs (a stub of) the host packages and links the warm cache's binaries")
	}
	requireWarmCache(t)
	block, err := codeBlock(readme(t), "two commands")
	if err != nil {
		t.Fatal(err)
	}
	cmds := commands(block)
	lines := make([]string, 0, len(cmds))
	for _, c := range cmds {
		lines = append(lines, c.Line)
	}
	if !slices.Equal(lines, []string{"make run", "make test"}) {
		t.Fatalf("README.md's two commands are %q; this test knows make run and make test", lines)
	}
	realNode, err := codeBlock(readme(t), "real-node start")
	if err != nil {
		t.Fatal(err)
	}
	runRealNode := commands(realNode)[0].Line

	t.Run("without root, "+runRealNode+" and make test print the command that installs the Debian packages", func(t *testing.T) {
		m := newFreshMachine(t, 1000, "exit 0")
		for _, line := range []string{runRealNode, "make test"} {
			args := strings.Fields(strings.TrimPrefix(line, "sudo "))[1:]
			began := time.Now()
			out, err := m.make(5*time.Minute, args...)
			if err == nil {
				t.Errorf("%s on a machine without the Debian packages, not as root: succeeded\n%s", line, out)
			}
			if !strings.Contains(out, "\n  sudo make host-packages\n") || !strings.Contains(out, "missing Debian packages: ") {
				t.Errorf("%s does not print `sudo make host-packages` with the missing packages:\n%s", line, out)
			}
			if entries, _ := os.ReadDir(m.cache); len(entries) != 0 {
				t.Errorf("%s built into the cache before saying that the packages are missing: %d entries", line, len(entries))
			}
			if calls := m.aptCalls(); len(calls) != 0 {
				t.Errorf("%s ran apt-get without root: %q", line, calls)
			}
			t.Logf("%s stopped after %.1fs:\n%s", line, time.Since(began).Seconds(), lastLines(out, 4))
		}
	})

	t.Run("as root, the setup of make test installs the missing packages, then builds each cache, in order and timed", func(t *testing.T) {
		m := newFreshMachine(t, 0, "exit 0")
		if err := os.MkdirAll(filepath.Join(m.cache, "images"), 0o755); err != nil {
			t.Fatal(err)
		}
		linkImages(t, devcluster.DefaultImagesDir(), filepath.Join(m.cache, "images"))
		out, err := m.make(10*time.Minute, "setup")
		if err != nil {
			t.Fatalf("make setup: %v\n%s", err, out)
		}
		calls := m.aptCalls()
		want := []string{"update --error-on=any", "install -y -qq " + strings.Join(missingOrder(), " ")}
		if len(calls) != 2 || strings.TrimSpace(calls[0]) != want[0] || strings.TrimSpace(calls[1]) != want[1] {
			t.Errorf("apt-get calls %q, want %q", calls, want)
		}
		var steps []string
		for _, line := range strings.Split(out, "\n") {
			if rest, ok := strings.CutPrefix(line, "setup: "); ok && strings.Contains(rest, " done (") {
				steps = append(steps, strings.Fields(rest)[0])
			}
		}
		if want := []string{"host-packages", "k8s-tools", "cert-manager-tools", "node-tools", "backup-tools", "engine-images"}; !slices.Equal(steps, want) {
			t.Errorf("make setup's timed steps: %q, want %q\n%s", steps, want, out)
		}
		for _, dir := range []string{"k8s/" + devcluster.KubernetesVersion, "node", "backup"} {
			if entries, err := os.ReadDir(filepath.Join(m.cache, dir)); err != nil || len(entries) == 0 {
				t.Errorf("make setup left %s empty: %v", dir, err)
			}
		}
		if err := devcluster.CheckBinaries(filepath.Join(m.cache, "k8s", devcluster.KubernetesVersion)); err != nil {
			t.Error(err)
		}
		// Once set up, the machine needs nothing more.
		out, err = m.make(5*time.Minute, "setup")
		if err != nil || !strings.Contains(out, "setup: host packages installed") || strings.Contains(out, "building") {
			t.Errorf("make setup a second time: %v; want no install and no build:\n%s", err, out)
		}
		if calls := m.aptCalls(); len(calls) != 2 {
			t.Errorf("the second make setup ran apt-get: %q", calls)
		}
	})

	t.Run("as root, an apt-get update that cannot refresh the indexes stops make host-packages, naming why", func(t *testing.T) {
		const why = "E: The repository 'http://deb.example bookworm InRelease' is not signed."
		m := newFreshMachine(t, 0, fmt.Sprintf("\techo \"W: GPG error: http://deb.example bookworm InRelease: NO_PUBKEY\"\n\techo %q >&2\n\texit 100", why))
		for _, target := range []string{"host-packages", "setup"} {
			out, err := m.make(time.Minute, target)
			if err == nil {
				t.Errorf("make %s succeeded although apt-get update failed:\n%s", target, out)
			}
			if !strings.Contains(out, why) || !strings.Contains(out, "could not refresh the package indexes") {
				t.Errorf("make %s does not say why apt-get update failed:\n%s", target, out)
			}
			for _, c := range m.aptCalls() {
				if strings.HasPrefix(c, "install") {
					t.Errorf("make %s installed from stale indexes: apt-get %s", target, c)
				}
			}
		}
	})
}

// missingOrder is the order in which hack/host-packages.sh lists the
// packages, all of which the fresh machine lacks.
func missingOrder() []string {
	return []string{"runc", "containernetworking-plugins", "iptables", "conntrack", "iproute2", "mmdebstrap", "postgresql-15", "barman-cli-cloud", "prometheus"}
}

// linkImages hard-links the image archives and installed-package caches of
// from into to (the same file system: the cache directory's), as the
// fresh machine's engine-images finds them built.
func linkImages(t *testing.T, from, to string) {
	t.Helper()
	out, err := exec.Command("cp", "-al", from+"/.", to).CombinedOutput()
	if err != nil {
		// Another file system: a copy by symbolic links.
		out2, err2 := exec.Command("cp", "-as", from+"/.", to).CombinedOutput()
		if err2 != nil {
			t.Fatalf("linking the images: %v: %s; %v: %s", err, out, err2, out2)
		}
	}
	_ = os.Remove(filepath.Join(to, devcluster.ImagesListFile))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
