package linger_test

// This file is a statement of policy, as go/build/deps_test.go is for Go:
// the import direction of the package table in docs/architecture.md, which
// says why each rule holds. Arrows point down only.
// The engine knows nothing of the server, the timeline knows nothing of the
// engine beyond timeline/event, and web knows no domain type. A new package
// falls under the rule of its nearest listed ancestor; a change of direction
// is a change of this table, made on purpose and explained in review.

import (
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "linger"

// policy maps a package (relative to the module) to the project packages it
// may import. "x/..." means x and everything below it. "*" means anything.
var policy = map[string][]string{
	"cmd/linger": {"*"},
	// The CUDA kernel binary: the kernel process and generate with the cuda
	// device added, nothing else of its own.
	"cmd/linger-cuda": {"*"},
	// What the commands share (dispatch, flags, generate): the engine and
	// the trace writer, never the server.
	"internal/cli": {"engine/...", "timeline", "timeline/event", "internal/units"},
	"test":         {"*"}, // end-to-end tests driving the built binary and a browser
	"server": {"notebooks/kernel", "notebooks/kernel/wire", "notebooks/contents", "notebooks/nbformat", "notebooks/msg",
		"timeline/...", "web/...", "server/..."},
	"server/live":        {"timeline", "timeline/event", "timeline/lod", "timeline/traces", "server/httperr"},
	"server/httperr":     {},                // the one error vocabulary of the server's routes and live's
	"server/hub":         {"notebooks/msg"}, // JupyterHub's OAuth and activity, for single-user mode (dates as msg writes them)
	"server/hub/hubtest": {"server/hub"},    // a stand-in hub for single-user mode's tests
	"web":                {"internal/units"},
	"notebooks":          {"notebooks/nbformat", "notebooks/msg"}, // contents, nbformat, msg: the notebook formats, no engine
	// The kernel's server side (the Manager) and the pipe protocol run in
	// the server; only the kernel process (proc) runs the engine and
	// Starlark. See also serverSide.
	"notebooks/kernel":      {"notebooks/kernel/wire", "notebooks/msg", "timeline/...", "internal/units"},
	"notebooks/kernel/wire": {"notebooks/msg", "timeline/event", "internal/units"},
	"notebooks/kernel/proc": {"engine/...", "notebooks/kernel/wire", "notebooks/msg", "timeline/...", "internal/units"},
	"notebooks/msg":         {},
	"engine":                {"engine/...", "timeline/event"},
	"engine/alloc":          {"engine/device", "timeline/event", "internal/units"},
	"engine/device":         {},
	// The cuda device: gorgonia.org/cu (the driver API) and the Device
	// interface. Built only with the cuda tag, imported only by
	// cmd/linger-cuda (see cudaOnly).
	"engine/device/cuda": {"engine/device"},
	"engine/tokenizer":   {"timeline/event", "engine/tokenizer/..."},
	"timeline":           {"timeline/event"},
	"timeline/analyze":   {"timeline/event", "timeline/memstate", "internal/units"},
	"timeline/lod":       {"timeline", "timeline/event", "timeline/memstate"}, // level-of-detail queries over a trace log
	"timeline/export":    {"timeline/event", "timeline/memstate", "timeline/analyze"},
	// A trace and everything derived from it, and the set of them a
	// server keeps: live ones by Source, saved ones by file.
	"timeline/traces": {"timeline", "timeline/event", "timeline/lod", "timeline/analyze"},
	"timeline/event":  {},
	"internal/units":  {}, // byte sizes read and printed, for every layer
	// The image and the JupyterHub values (docs/deploy.md): tests only, and
	// a test file may import anything.
	"deploy": {},
	// The rules that turn events into memory figures, which analyze, lod
	// and export share; and go generate's writer of the browser's copy of
	// the wire constants (web/ui/src/timeline/wire.gen.js).
	"timeline/memstate":               {"timeline/event"},
	"timeline/event/internal/genwire": {"timeline/event"},

	// Helpers for tests, imported only by _test.go files (testOnly).
	"timeline/event/eventtest": {"timeline/event"}, // an in-memory Sink
	"notebooks/msg/msgtest":    {"notebooks/msg"},  // the messages a test collected from a kernel
	"internal/testbin":         {},                 // the linger binary, built once per test binary
	"internal/browsertest":     {},                 // Chromium, axe-core and the UI's bundles
	"engine/device/devicetest": {"engine/device"},  // an Accelerator over host memory, its kernels in plain Go
}

// serverSide lists the packages that run in the server process, and
// kernelOnly what they must not depend on, not even through other project
// packages: the engine and Starlark run in kernel processes only.
var (
	serverSide = []string{"server/...", "notebooks/kernel", "notebooks/kernel/wire"}
	kernelOnly = []string{module + "/engine/...", "go.starlark.net/..."}
)

// cudaOnly is what needs the CUDA driver: gorgonia.org/cu's init calls
// cuInit and exits without a driver, and a binary linked with -lcuda does
// not start without libcuda.so.1. Only cudaBinaries may reach it, through
// any chain of imports; cmd/linger must start on any machine. cuPackages
// lists the packages that may import gorgonia.org/cu directly.
var (
	cudaOnly     = []string{module + "/engine/device/cuda", "gorgonia.org/cu/..."}
	cudaBinaries = []string{"cmd/linger-cuda", "engine/device/cuda"}
	cuPackages   = []string{"engine/device/cuda"}
)

// stdlibOnly lists packages that may import nothing outside the standard
// library. (web imports templ, but nothing of Linger.)
var stdlibOnly = []string{"timeline/event", "internal/units", "server/httperr", "timeline/event/eventtest", "internal/testbin", "engine/device/devicetest"}

// testOnly lists the helpers for tests, which no package may import
// outside its _test.go files.
var testOnly = []string{"timeline/event/eventtest", "server/hub/hubtest", "notebooks/msg/msgtest", "internal/testbin", "internal/browsertest", "engine/device/devicetest"}

func matches(pattern, pkg string) bool {
	if pattern == "*" {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// rule returns the policy entry governing pkg: its own or its nearest ancestor's.
func rule(pkg string) (string, bool) {
	for p := pkg; ; {
		if _, ok := policy[p]; ok {
			return p, true
		}
		i := strings.LastIndex(p, "/")
		if i < 0 {
			return "", false
		}
		p = p[:i]
	}
}

// allowed reports whether pkg may import the project package dep.
func allowed(pkg, dep string) bool {
	r, ok := rule(pkg)
	if !ok {
		return false
	}
	if dep == pkg || strings.HasPrefix(dep, pkg+"/internal/") {
		return true
	}
	for _, p := range policy[r] {
		if matches(p, dep) {
			return true
		}
	}
	return false
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") && first != module
}

func TestPolicyRejects(t *testing.T) {
	for _, c := range []struct {
		pkg, dep string
		ok       bool
	}{
		{"engine", "server", false},
		{"engine", "timeline", false},
		{"engine", "engine/alloc", true},
		{"engine/alloc", "engine", false},
		{"engine/device", "timeline/event", false},
		{"timeline", "engine/alloc", false},
		{"timeline/event", "timeline", false},
		{"timeline/export", "timeline/analyze", true},
		{"timeline/analyze", "timeline/export", false},
		{"web", "engine", false},
		{"engine/tokenizer", "engine/alloc", false},
		{"cmd/linger", "server", true},
		{"server/live", "server/httperr", true},
		{"server/httperr", "notebooks/kernel", false},
		{"nosuch", "engine", false},
		{"server", "engine", false},
		{"server", "engine/alloc", false},
		{"server", "notebooks/kernel", true},
		{"server", "notebooks/kernel/wire", true},
		{"server", "notebooks/kernel/proc", false},
		{"server/live", "notebooks/kernel/proc", false},
		{"notebooks/kernel", "notebooks/kernel/wire", true},
		{"notebooks/kernel", "timeline", true},
		{"notebooks/kernel", "notebooks/kernel/proc", false},
		{"notebooks/kernel", "engine", false},
		{"notebooks/kernel", "engine/alloc", false},
		{"notebooks/kernel/wire", "engine/alloc", false},
		{"notebooks/kernel/wire", "notebooks/kernel", false},
		{"notebooks/kernel/proc", "engine/alloc", true},
		{"notebooks/kernel/proc", "notebooks/kernel", false},
		{"notebooks/kernel/proc", "server", false},
		{"notebooks/contents", "engine", false},
		{"notebooks/contents", "notebooks/nbformat", true},
		{"timeline/memstate", "timeline", false},
		{"timeline/lod", "timeline/memstate", true},
	} {
		if got := allowed(c.pkg, c.dep); got != c.ok {
			t.Errorf("allowed(%q, %q) = %v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}

// TestDependencyPolicy reads the imports of every non-test Go file in the
// module, whatever its build tags, and checks them against policy.
func TestDependencyPolicy(t *testing.T) {
	imports := moduleImports(t)
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		if _, ok := rule(pkg); !ok {
			t.Errorf("package %s is not in the dependency policy; add it to deps_test.go with its allowed imports", pkg)
			continue
		}
		stdOnly := slices.ContainsFunc(stdlibOnly, func(p string) bool { return matches(p, pkg) })
		for _, dep := range slices.Sorted(maps.Keys(imports[pkg])) {
			switch {
			case isStdlib(dep):
			case dep == module || strings.HasPrefix(dep, module+"/"):
				rel := strings.TrimPrefix(dep, module+"/")
				if !allowed(pkg, rel) {
					t.Errorf("%s imports %s, which the policy forbids", pkg, dep)
				}
				if slices.Contains(testOnly, rel) {
					t.Errorf("%s imports %s, a helper for tests, outside its _test.go files", pkg, dep)
				}
			case stdOnly:
				t.Errorf("%s imports %s, but may use only the standard library", pkg, dep)
			}
		}
	}
}

// TestServerSide checks that no server-side package reaches the engine or
// Starlark, directly or through any chain of project packages.
func TestServerSide(t *testing.T) {
	imports := moduleImports(t)
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		if !slices.ContainsFunc(serverSide, func(p string) bool { return matches(p, pkg) }) {
			continue
		}
		if chain := kernelOnlyChain(imports, pkg); chain != nil {
			t.Errorf("%s reaches %s, which runs only in kernel processes", pkg, strings.Join(chain, " → "))
		}
	}
}

// TestNoCUDA checks that only the CUDA binary reaches the cuda device or
// gorgonia.org/cu, directly or through any chain of project packages, and
// that only the cuda device imports cu itself.
func TestNoCUDA(t *testing.T) {
	imports := moduleImports(t)
	if imports["engine/device/cuda"] == nil || !imports["engine/device/cuda"]["gorgonia.org/cu"] {
		t.Fatal("engine/device/cuda not found, or not importing gorgonia.org/cu: the check below would prove nothing")
	}
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		if slices.ContainsFunc(cudaBinaries, func(p string) bool { return matches(p, pkg) }) {
			continue
		}
		if chain := chainTo(imports, pkg, cudaOnly); chain != nil {
			t.Errorf("%s reaches %s, which needs the CUDA driver: only %s may", pkg, strings.Join(chain, " → "), strings.Join(cudaBinaries, " and "))
		}
	}
	for pkg, deps := range imports {
		for dep := range deps {
			if matches("gorgonia.org/cu/...", dep) && !slices.Contains(cuPackages, pkg) {
				t.Errorf("%s imports %s; only %s may", pkg, dep, strings.Join(cuPackages, ", "))
			}
		}
	}
}

func TestNoCUDARejects(t *testing.T) {
	imports := map[string]map[string]bool{
		"cmd/linger":            {"linger/notebooks/kernel/proc": true},
		"notebooks/kernel/proc": {"linger/engine": true},
		"engine":                {"linger/engine/device/cuda": true},
	}
	want := "notebooks/kernel/proc → engine → linger/engine/device/cuda"
	if got := strings.Join(chainTo(imports, "cmd/linger", cudaOnly), " → "); got != want {
		t.Errorf("chain %q, want %q", got, want)
	}
	imports["engine"] = map[string]bool{"gorgonia.org/cu": true}
	if got := chainTo(imports, "cmd/linger", cudaOnly); len(got) != 3 || got[2] != "gorgonia.org/cu" {
		t.Errorf("chain %q, want one to gorgonia.org/cu", got)
	}
}

func TestServerSideRejects(t *testing.T) {
	imports := map[string]map[string]bool{
		"server":                {"linger/notebooks/kernel": true, "linger/timeline": true},
		"notebooks/kernel":      {"linger/notebooks/kernel/wire": true, "linger/notebooks/kernel/proc": true},
		"notebooks/kernel/wire": {"encoding/json": true},
		"notebooks/kernel/proc": {"go.starlark.net/starlark": true},
		"timeline":              {"linger/timeline/event": true},
	}
	want := "notebooks/kernel → notebooks/kernel/proc → go.starlark.net/starlark"
	if got := strings.Join(kernelOnlyChain(imports, "server"), " → "); got != want {
		t.Errorf("server: chain %q, want %q", got, want)
	}
	imports["notebooks/kernel"]["linger/engine/alloc"] = true
	delete(imports["notebooks/kernel"], "linger/notebooks/kernel/proc")
	if got := strings.Join(kernelOnlyChain(imports, "server"), " → "); got != "notebooks/kernel → linger/engine/alloc" {
		t.Errorf("server: chain %q, want one to the engine", got)
	}
	if chain := kernelOnlyChain(imports, "timeline"); chain != nil {
		t.Errorf("timeline: chain %q, want none", chain)
	}
}

// kernelOnlyChain returns the shortest chain of imports from pkg to a
// kernelOnly package (project packages relative to the module, the last
// as imported), or nil when there is none.
func kernelOnlyChain(imports map[string]map[string]bool, pkg string) []string {
	return chainTo(imports, pkg, kernelOnly)
}

// chainTo returns the shortest chain of imports from pkg to a package
// that one of the patterns matches (project packages relative to the
// module, the last as imported), or nil when there is none.
func chainTo(imports map[string]map[string]bool, pkg string, forbidden []string) []string {
	from := map[string]string{pkg: ""}
	chain := func(p, last string) []string {
		out := []string{last}
		for ; p != pkg; p = from[p] {
			out = append(out, p)
		}
		slices.Reverse(out)
		return out
	}
	for queue := []string{pkg}; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		for _, dep := range slices.Sorted(maps.Keys(imports[p])) {
			if slices.ContainsFunc(forbidden, func(k string) bool { return matches(k, dep) }) {
				return chain(p, dep)
			}
			rel, ok := strings.CutPrefix(dep, module+"/")
			if _, seen := from[rel]; ok && !seen {
				from[rel] = p
				queue = append(queue, rel)
			}
		}
	}
	return nil
}

// moduleImports returns the imports of every package in the module,
// relative to the module root, from its non-test Go files whatever their
// build tags.
func moduleImports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	imports := map[string]map[string]bool{} // package → imports
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if imports[pkg] == nil {
			imports[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			imports[pkg][p] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"timeline/event", "engine/alloc", "engine/device"} {
		if imports[must] == nil {
			t.Fatalf("package %s not found; is the test running at the module root?", must)
		}
	}
	return imports
}

func TestMain(m *testing.M) {
	if _, err := os.Stat("go.mod"); err != nil {
		panic("deps_test must run at the module root")
	}
	os.Exit(m.Run())
}
