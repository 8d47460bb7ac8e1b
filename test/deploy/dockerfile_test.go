package deploy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
	"github.com/dbkeeper/dbkeeper/test/images/ociimage"
)

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
}

// stage is one FROM and the instructions after it.
type stage struct {
	from         string // the image
	name         string // AS name
	instructions []instruction
}

func parseDockerfile(t testing.TB, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stages []stage
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if line.Len() == 0 && (text == "" || strings.HasPrefix(text, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(text, `\`); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(text)
		cmd, args, _ := strings.Cut(line.String(), " ")
		line.Reset()
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			s := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			t.Fatalf("%s: %s before FROM", path, in.cmd)
		}
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// shellWords splits a simple shell command line into words, removing
// quotes and expanding ${NAME}, ${NAME:-default} and $NAME from vars.
func shellWords(t testing.TB, line string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord := false
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == 0 && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case quote == 0 && (c == '\'' || c == '"'):
			quote, inWord = c, true
		case c == quote:
			quote = 0
		case quote == 0 && strings.ContainsRune(";&|<>`", rune(c)):
			t.Fatalf("the build command %q uses %q; this test only understands a single simple command", line, c)
		case c == '$' && quote != '\'':
			inWord = true
			rest := line[i+1:]
			if strings.HasPrefix(rest, "{") {
				end := strings.IndexByte(rest, '}')
				if end < 0 {
					t.Fatalf("unterminated ${ in %q", line)
				}
				name, def, hasDef := strings.Cut(rest[1:end], ":-")
				v, ok := vars[name]
				if (!ok || v == "") && hasDef {
					v = def
				}
				word.WriteString(v)
				i += end + 1
			} else {
				n := 0
				for n < len(rest) && (rest[n] == '_' || 'A' <= rest[n] && rest[n] <= 'Z' || 'a' <= rest[n] && rest[n] <= 'z' || '0' <= rest[n] && rest[n] <= '9') {
					n++
				}
				word.WriteString(vars[rest[:n]])
				i += n
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

func TestDockerfile(t *testing.T) {
	root := testenv.ProjectRoot()
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	final := stages[len(stages)-1]
	var builder stage
	var build instruction
	for _, s := range stages[:len(stages)-1] {
		for _, in := range s.all("RUN") {
			if strings.Contains(in.args, "go build") {
				builder, build = s, in
			}
		}
	}
	if build.cmd == "" {
		t.Fatal("no stage before the last runs go build")
	}
	// What the build stage's RUN sees: the ARGs a plain `docker build`
	// leaves empty take the defaults the command gives them.
	vars := map[string]string{"TARGETARCH": runtime.GOARCH}
	words := shellWords(t, build.args, vars)
	env := map[string]string{}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		k, v, _ := strings.Cut(words[0], "=")
		env[k] = v
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		t.Fatalf("the build RUN is not `[VAR=value ...] go build ...`: %q", build.args)
	}
	buildArgs := words[2:]

	t.Run("the runtime stage is distroless static as the nonroot user with only the binary", func(t *testing.T) {
		if final.from != "gcr.io/distroless/static:nonroot" {
			t.Errorf("runtime image %s, want gcr.io/distroless/static:nonroot", final.from)
		}
		users := final.all("USER")
		if len(users) == 0 || users[len(users)-1].args != "65532:65532" {
			t.Errorf("USER %v, want 65532:65532 last", users)
		}
		copies := final.all("COPY")
		if len(copies) != 1 || !strings.HasPrefix(copies[0].args, "--from="+builder.name+" ") {
			t.Fatalf("the runtime stage copies %v, want exactly one COPY --from=%s of the binary", copies, builder.name)
		}
		for _, forbidden := range []string{"RUN", "ADD"} {
			if n := len(final.all(forbidden)); n != 0 {
				t.Errorf("the runtime stage has %d %s instructions", n, forbidden)
			}
		}
		if ep := final.all("ENTRYPOINT"); len(ep) != 1 || !strings.Contains(ep[0].args, `"/manager"`) {
			t.Errorf("ENTRYPOINT %v, want the binary", ep)
		}
	})

	t.Run("the build is static and reproducible: CGO_ENABLED=0 and -trimpath", func(t *testing.T) {
		if env["CGO_ENABLED"] != "0" {
			t.Errorf("CGO_ENABLED=%q in %q, want 0", env["CGO_ENABLED"], build.args)
		}
		if !slices.Contains(buildArgs, "-trimpath") {
			t.Errorf("go build %v lacks -trimpath", buildArgs)
		}
	})

	t.Run("the build stage copies every package the manager imports", func(t *testing.T) {
		var copied []string
		for _, in := range builder.all("COPY") {
			fields := strings.Fields(in.args)
			for _, src := range fields[:len(fields)-1] {
				if !strings.HasPrefix(src, "--") {
					copied = append(copied, strings.TrimSuffix(src, "/"))
				}
			}
		}
		out, err := exec.Command("go", "list", "-C", root, "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/dbkeeper").Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for _, dir := range strings.Fields(string(out)) {
			rel, _ := filepath.Rel(root, dir)
			if !slices.ContainsFunc(copied, func(src string) bool { return rel == src || strings.HasPrefix(rel, src+"/") }) {
				t.Errorf("the manager imports ./%s, which the build stage does not COPY (it copies %v)", rel, copied)
			}
		}
	})

	t.Run("the binary the Dockerfile builds is static", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds the manager; skipped in -short mode")
		}
		out := filepath.Join(t.TempDir(), "dbkeeper")
		args := slices.Clone(buildArgs)
		if i := slices.Index(args, "-o"); i >= 0 && i+1 < len(args) {
			args[i+1] = out
		} else {
			t.Fatalf("go build %v has no -o", args)
		}
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if output, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s (env %v): %v\n%s", strings.Join(cmd.Args, " "), env, err, output)
		}
		f, err := elf.Open(out)
		if err != nil {
			t.Fatalf("reading %s as ELF: %v", out, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("the binary has a %s program header: it needs a dynamic loader that distroless static lacks", p.Type)
			}
		}
		for _, name := range []string{".interp", ".dynamic"} {
			if f.Section(name) != nil {
				t.Errorf("the binary has a %s section", name)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) != 0 {
			t.Errorf("the binary imports %v", libs)
		}
		info, err := buildinfo.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
			t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
		}
	})
}

// TestManagerImageIsTheDockerfiles checks the manager image that make
// engine-images builds without Docker (test/images/dbkeeper) and devcluster's
// real node imports against the Dockerfile: it runs the Dockerfile's go build
// commands, with their environment, in a copy of the build context the
// Dockerfile's COPY instructions make (nothing else of the checkout, no
// .git), and wants the image to hold exactly the files the runtime stage
// copies, byte for byte those binaries, with the Dockerfile's entrypoint and
// user.
func TestManagerImageIsTheDockerfiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager twice; skipped in -short mode")
	}
	root := testenv.ProjectRoot()
	archive := managerImageArchive(t)

	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	final := stages[len(stages)-1]
	context := t.TempDir()
	var builds []instruction
	for _, s := range stages[:len(stages)-1] {
		for _, in := range s.instructions {
			switch in.cmd {
			case "COPY":
				fields := strings.Fields(in.args)
				for _, src := range fields[:len(fields)-1] {
					copyTree(t, filepath.Join(root, src), filepath.Join(context, src))
				}
			case "RUN":
				if strings.Contains(in.args, "go build") {
					builds = append(builds, in)
				}
			}
		}
	}
	built := map[string][]byte{}
	for _, in := range builds {
		words := shellWords(t, in.args, map[string]string{"TARGETARCH": runtime.GOARCH})
		env := []string{"GOFLAGS=", "GOWORK=off"}
		for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			env = append(env, words[0])
			words = words[1:]
		}
		i := slices.Index(words, "-o")
		if i < 0 || i+1 >= len(words) {
			t.Fatalf("go build without -o: %q", in.args)
		}
		cmd := exec.Command(words[0], words[1:]...)
		cmd.Dir = context
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", in.args, err, out)
		}
		data, err := os.ReadFile(filepath.Join(context, words[i+1]))
		if err != nil {
			t.Fatal(err)
		}
		built[filepath.Base(words[i+1])] = data
	}

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	img, err := ociimage.Unpack(archive, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	// The files the runtime stage copies: COPY --from=builder SRC... DST.
	var want []string
	for _, in := range final.all("COPY") {
		fields := strings.Fields(in.args)
		for _, src := range fields[1 : len(fields)-1] {
			want = append(want, filepath.Base(src))
		}
	}
	var have []string
	err = filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == rootfs {
			return err
		}
		rel, _ := filepath.Rel(rootfs, path)
		have = append(have, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// InstallDir is /dbkeeper/bin: no file of the image may be on its path.
	installDir := instance.InstallDir + "/"
	for _, name := range have {
		if file := "/" + name + "/"; strings.HasPrefix(installDir, file) {
			t.Errorf("the image has /%s, on the path of %s, where postgres pods that run this image's instance agent mount an emptyDir", name, instance.InstallDir)
		}
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(have, want) {
		t.Errorf("the image holds %v, want exactly the runtime stage's %v", have, want)
	}
	for _, name := range want {
		got, err := os.ReadFile(filepath.Join(rootfs, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Equal(got, built[name]) {
			t.Errorf("/%s differs from the Dockerfile's build (sha256 %x in the image, %x from the Dockerfile): the two builds use other flags or inputs",
				name, sha256.Sum256(got), sha256.Sum256(built[name]))
		}
	}
	if users := final.all("USER"); len(users) == 0 || img.Config.User != users[len(users)-1].args {
		t.Errorf("the image runs as %q, the Dockerfile as %v", img.Config.User, users)
	}
	if ep := final.all("ENTRYPOINT"); len(ep) != 1 || !slices.Equal(img.Config.Entrypoint, []string{"/manager"}) || !strings.Contains(ep[0].args, `"/manager"`) {
		t.Errorf("the image's entrypoint is %v, the Dockerfile's %v; want /manager in both", img.Config.Entrypoint, ep)
	}
	t.Logf("%s: %v, identical to the Dockerfile's build", img.Name, want)
}

// managerImageArchive returns the archive of the manager image listed in
// the engine images' images.txt; it skips the test when the images are not
// built (make test builds them first).
func managerImageArchive(t testing.TB) string {
	t.Helper()
	images, err := devcluster.ReadImages(devcluster.DefaultImagesDir())
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("the engine images are not built: run `make engine-images`: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if strings.HasPrefix(img.Name, devcluster.ManagerImageRepository+":") {
			return img.File
		}
	}
	t.Fatalf("images.txt of %s lists no %s image: run `make engine-images`", devcluster.DefaultImagesDir(), devcluster.ManagerImageRepository)
	return ""
}

// copyTree copies a file or a directory tree.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
