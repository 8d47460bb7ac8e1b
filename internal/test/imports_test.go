package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// module is dbkeeper's module path.
const module = "github.com/dbkeeper/dbkeeper"

// infrastructure are the trees of the module that never ship: test and
// local-cluster infrastructure, the suites, and the development commands.
var infrastructure = []string{module + "/internal/test", module + "/test", module + "/hack"}

// isInfrastructure reports whether pkg is in one of the infrastructure trees.
func isInfrastructure(pkg string) bool {
	for _, tree := range infrastructure {
		if pkg == tree || strings.HasPrefix(pkg, tree+"/") {
			return true
		}
	}
	return false
}

// listed is what `go list -json` says of one package: its import path and
// every package its non-test files depend on, directly or not.
type listed struct {
	ImportPath string
	Deps       []string
}

// productViolations returns, for each package of the module that is not
// infrastructure, the infrastructure packages it depends on, as
// "product <- infrastructure" lines, sorted. The standard library's testing
// counts as infrastructure: a product package whose non-test files need it
// is a test helper that belongs under internal/test.
func productViolations(pkgs []listed) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) || isInfrastructure(p.ImportPath) {
			continue
		}
		for _, dep := range p.Deps {
			if isInfrastructure(dep) || dep == "testing" {
				out = append(out, p.ImportPath+" <- "+dep)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestProductImportsNoTestInfrastructure keeps what ships apart from what
// tests it: no product package, and so neither product binary, depends on
// internal/test, test/ or hack/, nor on the standard library's testing
// (test files are not counted: they do not ship).
func TestProductImportsNoTestInfrastructure(t *testing.T) {
	pkgs := goList(t)
	products := 0
	for _, p := range pkgs {
		if !isInfrastructure(p.ImportPath) {
			products++
		}
	}
	for _, binary := range []string{module + "/cmd/dbkeeper", module + "/cmd/dbkeeper-instance"} {
		if !slices.ContainsFunc(pkgs, func(p listed) bool { return p.ImportPath == binary }) {
			t.Fatalf("go list did not list %s: the check would look at nothing", binary)
		}
	}
	t.Logf("%d product packages of %d checked", products, len(pkgs))
	if bad := productViolations(pkgs); len(bad) > 0 {
		t.Errorf("product packages depend on test infrastructure; move the code they need out of the test trees, or the package into them:\n%s",
			strings.Join(bad, "\n"))
	}
}

// TestProductViolations shows the check catches what it is for: a product
// binary reaching test infrastructure through a product package, a product
// package importing a suite or a development command, and a test helper
// kept in a product tree; and that it leaves infrastructure's own imports
// and the rest of the standard library alone.
func TestProductViolations(t *testing.T) {
	pkgs := []listed{
		{ImportPath: module + "/cmd/dbkeeper", Deps: []string{"fmt", module + "/internal/controller", module + "/internal/test/fixture"}},
		{ImportPath: module + "/internal/controller", Deps: []string{module + "/internal/test/fixture"}},
		{ImportPath: module + "/internal/desired", Deps: []string{module + "/test/e2e", module + "/hack/devcluster", module + "/internal/testing"}},
		{ImportPath: module + "/internal/test/testenv", Deps: []string{module + "/internal/test/devcluster"}},
		{ImportPath: module + "/hack/devcluster", Deps: []string{module + "/internal/test/devcluster"}},
		{ImportPath: module + "/internal/rules", Deps: []string{module + "/api/v1alpha1", "testing/fstest"}},
		{ImportPath: module + "/internal/instance/agenttest", Deps: []string{"crypto/tls", "testing"}},
	}
	got := productViolations(pkgs)
	want := []string{
		module + "/cmd/dbkeeper <- " + module + "/internal/test/fixture",
		module + "/internal/controller <- " + module + "/internal/test/fixture",
		module + "/internal/desired <- " + module + "/hack/devcluster",
		module + "/internal/desired <- " + module + "/test/e2e",
		module + "/internal/instance/agenttest <- testing",
	}
	if !slices.Equal(got, want) {
		t.Errorf("productViolations:\n got %q\nwant %q", got, want)
	}
}

// goList lists every package of the module with the packages its non-test
// files depend on.
func goList(t *testing.T) []listed {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "list", "-json=ImportPath,Deps", "./...")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	raw, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// The instance agent's rooms (internal/instance/doc.go): the contract the
// operator speaks, the PostgreSQL server, and the agent on top of both.
const (
	contractPkg = module + "/internal/instance"
	serverPkg   = module + "/internal/instance/postgres"
	agentPkg    = module + "/internal/instance/agent"
	agentBinary = module + "/cmd/dbkeeper-instance"
	// sidecarAPIPkg is the backup sidecar's contract, the socket's API and
	// its Client: the agent calls the sidecar through it, the contract
	// carries its answers, the controller reads them.
	sidecarAPIPkg = module + "/internal/archiver"
	// sidecarPkg is the sidecar's server side, which runs barman-cloud in
	// a container of its own: the sidecar's command's alone.
	sidecarPkg = module + "/internal/archiver/sidecar"
	// managerBinary is the operator.
	managerBinary = module + "/cmd/dbkeeper"
	controllerPkg = module + "/internal/controller"
)

// reachableFrom says which product packages may depend, directly or not,
// on each room of the agent: the server code only from the agent (and its
// binary), the agent only from its binary, the backup sidecar's server
// side only from its binary (the agent's, whose `archiver` subcommand is
// the sidecar container's). The contracts are everyone's.
var reachableFrom = map[string][]string{
	serverPkg:  {agentPkg, agentBinary},
	agentPkg:   {agentBinary},
	sidecarPkg: {agentBinary},
}

// forbidden says what each room must not depend on: the contract none of
// the agent's code nor the sidecar's server side, the server nothing of
// the agent, the contract or the operator, the controller not the
// sidecar's server side, and the backup sidecar (either side) nothing of
// the agent's rooms or the operator, its contract not its server side.
var forbidden = map[string][]string{
	contractPkg:   {serverPkg, agentPkg, sidecarPkg},
	serverPkg:     {contractPkg, agentPkg, controllerPkg, module + "/internal/desired", module + "/api/v1alpha1"},
	controllerPkg: {sidecarPkg},
	sidecarAPIPkg: {sidecarPkg, contractPkg, serverPkg, agentPkg, controllerPkg, module + "/internal/desired", module + "/api/v1alpha1"},
	sidecarPkg:    {contractPkg, serverPkg, agentPkg, controllerPkg, module + "/internal/desired", module + "/api/v1alpha1"},
}

// arrowViolations returns, for each product package, the dependencies that
// run against the agent's arrows (agent -> server, agent -> contract,
// controller -> contract only), as "package -> dependency" lines, sorted.
func arrowViolations(pkgs []listed) []string {
	var out []string
	for _, p := range pkgs {
		if !strings.HasPrefix(p.ImportPath, module) || isInfrastructure(p.ImportPath) {
			continue
		}
		for _, dep := range p.Deps {
			if allowed, guarded := reachableFrom[dep]; guarded && !slices.Contains(allowed, p.ImportPath) {
				out = append(out, p.ImportPath+" -> "+dep)
			}
			if slices.Contains(forbidden[p.ImportPath], dep) {
				out = append(out, p.ImportPath+" -> "+dep)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestInstanceArrowsRunOneWay keeps the agent's rooms apart: the operator
// reaches the agents through their contract only, the server code is the
// agent's alone, and neither the contract nor the server knows the agent.
func TestInstanceArrowsRunOneWay(t *testing.T) {
	pkgs := goList(t)
	for _, room := range []string{contractPkg, serverPkg, agentPkg, agentBinary, controllerPkg, sidecarAPIPkg, sidecarPkg} {
		if !slices.ContainsFunc(pkgs, func(p listed) bool { return p.ImportPath == room }) {
			t.Fatalf("go list did not list %s: the check would look at nothing", room)
		}
	}
	if bad := arrowViolations(pkgs); len(bad) > 0 {
		t.Errorf("dependencies run against the agent's arrows (internal/instance/doc.go): the operator imports internal/instance only, the server package is the agent's alone, the backup sidecar's server side (internal/archiver/sidecar) the sidecar's command's alone:\n%s",
			strings.Join(bad, "\n"))
	}
}

// TestArrowViolations shows the check catches each way back: the
// controller reaching the server code (directly or through the agent) or
// the backup sidecar's server side, the contract depending on the agent or
// on the sidecar's server side, the server on the contract or the agent,
// either side of the sidecar on the contract, the sidecar's contract on
// its server side, the agent's code and the operator's binary linking the
// sidecar's server side, and another product using the agent; and that it
// allows the agent's own arrows and the sidecar's command.
func TestArrowViolations(t *testing.T) {
	pkgs := []listed{
		{ImportPath: controllerPkg, Deps: []string{contractPkg, serverPkg, sidecarAPIPkg, sidecarPkg}},
		{ImportPath: module + "/internal/desired", Deps: []string{contractPkg, agentPkg, serverPkg, sidecarAPIPkg}},
		{ImportPath: contractPkg, Deps: []string{agentPkg, serverPkg, sidecarAPIPkg, sidecarPkg, module + "/internal/replication"}},
		{ImportPath: serverPkg, Deps: []string{contractPkg, module + "/internal/pki"}},
		{ImportPath: agentPkg, Deps: []string{contractPkg, serverPkg, sidecarAPIPkg, sidecarPkg}},
		{ImportPath: agentBinary, Deps: []string{agentPkg, serverPkg, contractPkg, sidecarAPIPkg, sidecarPkg}},
		{ImportPath: managerBinary, Deps: []string{controllerPkg, contractPkg, sidecarAPIPkg, sidecarPkg}},
		{ImportPath: module + "/internal/test/devcluster", Deps: []string{agentPkg, sidecarPkg}},
		{ImportPath: sidecarAPIPkg, Deps: []string{contractPkg, sidecarPkg, module + "/internal/replication"}},
		{ImportPath: sidecarPkg, Deps: []string{sidecarAPIPkg, contractPkg, module + "/internal/replication"}},
	}
	got := arrowViolations(pkgs)
	want := []string{
		managerBinary + " -> " + sidecarPkg,
		sidecarAPIPkg + " -> " + contractPkg,
		sidecarAPIPkg + " -> " + sidecarPkg,
		sidecarPkg + " -> " + contractPkg,
		controllerPkg + " -> " + serverPkg,
		controllerPkg + " -> " + sidecarPkg,
		module + "/internal/desired -> " + agentPkg,
		module + "/internal/desired -> " + serverPkg,
		contractPkg + " -> " + agentPkg,
		contractPkg + " -> " + serverPkg,
		contractPkg + " -> " + sidecarPkg,
		agentPkg + " -> " + sidecarPkg,
		serverPkg + " -> " + contractPkg,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("arrowViolations:\n got %q\nwant %q", got, want)
	}
}

// TestManagerDoesNotLinkTheSidecarServer checks the operator's binary as
// `go list -deps` sees it: it links the sidecar's contract (the agents'
// status carries its answers) but not its server side, which runs
// barman-cloud; the agent's binary, whose `archiver` subcommand is the
// sidecar container's command, does link it, so the check looks at the
// package that exists.
func TestManagerDoesNotLinkTheSidecarServer(t *testing.T) {
	deps := func(binary string) []string {
		t.Helper()
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("go", "list", "-deps", binary)
		cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
		out, err := cmd.Output()
		if err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				t.Fatalf("go list -deps %s: %v\n%s", binary, err, exit.Stderr)
			}
			t.Fatalf("go list -deps %s: %v", binary, err)
		}
		return strings.Fields(string(out))
	}
	if agent := deps(agentBinary); !slices.Contains(agent, sidecarPkg) {
		t.Fatalf("%s does not link %s: the sidecar's server side moved, and this check would look at nothing", agentBinary, sidecarPkg)
	}
	manager := deps(managerBinary)
	if !slices.Contains(manager, sidecarAPIPkg) {
		t.Fatalf("%s does not link %s: go list's answer is not the operator's dependencies", managerBinary, sidecarAPIPkg)
	}
	if slices.Contains(manager, sidecarPkg) {
		t.Errorf("%s links %s, the backup sidecar's server side (barman-cloud's runner): the operator may import internal/archiver only", managerBinary, sidecarPkg)
	}
}
