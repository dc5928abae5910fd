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
// may import, besides the leaves. "x/..." means x and everything below it.
// "*" means anything. The rooms of the tree carry most of it: a package
// falls under its nearest listed ancestor, so server/live and
// engine/tokenizer/internal/gen need no line of their own unless they are
// narrower than their room.
var policy = map[string][]string{
	// The binaries, and what they share (dispatch, flags, generate, the
	// kernel command and its kernelspec): the engine, the kernel and the
	// trace writer, never the server.
	"cmd":              {"*"},
	"cmd/internal/cli": {"engine/...", "kernel", "kernel/zmqkernel", "timeline", "timeline/event"},
	"test":             {"*"}, // end-to-end tests driving the built binary and a browser
	"deploy":           {},    // the image and the JupyterHub values (docs/deploy.md): tests only
	// The kernel process: the only code that runs the engine and
	// Starlark (see engineSide). Its wire is the one part of the room the
	// server may import.
	"kernel":      {"engine/...", "kernel/wire", "notebooks/msg", "timeline/..."},
	"kernel/wire": {"notebooks/msg", "timeline/event"},
	// The Jupyter kernel over ZeroMQ (linger kernel --connection-file):
	// a bridge between the sockets and the kernel's pipe, writing the
	// trace. It runs beside the kernel, not the engine: cmd hands it
	// kernel.Serve, so it reaches neither the engine nor Starlark.
	"kernel/zmqkernel": {"kernel/wire", "notebooks/msg", "timeline", "timeline/event"},
	// The engine knows nothing of the server, and of the timeline only
	// its events. The cuda device: gorgonia.org/cu and the Device
	// interface, built only with the cuda tag (see cudaOnly).
	"engine":             {"engine/...", "timeline/event"},
	"engine/alloc":       {"engine/device", "timeline/event"},
	"engine/device":      {},
	"engine/device/cuda": {"engine/device"},
	"engine/tokenizer":   {"timeline/event", "engine/tokenizer/..."},
	// The timeline: events at the bottom, then the rules from events to
	// memory figures (memstate) and the figures per time bucket (pyramid),
	// which the log stores at its end, the log, and above them what is
	// derived: the index, the analysis, the exports, and the model of a
	// trace that owns them for the server (traces).
	"timeline":                        {"timeline/event", "timeline/pyramid"},
	"timeline/event":                  {},
	"timeline/event/internal/genwire": {"timeline/event"},
	"timeline/memstate":               {"timeline/event"},
	"timeline/pyramid":                {"timeline/event", "timeline/memstate"},
	"timeline/analyze":                {"timeline/event", "timeline/memstate"},
	"timeline/lod":                    {"timeline", "timeline/event", "timeline/pyramid"},
	"timeline/export":                 {"timeline/event", "timeline/memstate", "timeline/analyze"},
	"timeline/plot":                   {"timeline/event", "timeline/memstate"}, // a kernel's memory history, drawn as SVG and PNG (timeline.plot())
	"timeline/traces":                 {"timeline", "timeline/event", "timeline/lod", "timeline/analyze"},
	"timeline/pickle":                 {},                                                // Python pickles of plain data, read as a stream, never run
	"timeline/torchsnap":              {"timeline", "timeline/event", "timeline/pickle"}, // PyTorch's memory snapshots, read as a stream
	"timeline/goheap":                 {"timeline", "timeline/event"},                    // a Go service's heap profiles, goroutines and GC pauses over time (linger watch)
	"timeline/goheap/goheaptest":      {},                                                // a Go service to watch, for tests
	// A probe inside a Go service: the events, nothing else of Linger,
	// not even the leaves (see sealed), and no module outside the
	// standard library (stdlibOnly): a service links no more.
	"probe": {"timeline/event"},
	// The example services (examples/gateway): a Go service as a user
	// writes one, on the engine, instrumented with the probe, writing a
	// trace file through the timeline's writer; never the server.
	"examples": {"examples/...", "engine/...", "probe", "timeline", "timeline/event"},
	// The notebook formats and the notebook directory, no engine.
	"notebooks":     {"notebooks/nbformat", "notebooks/msg"},
	"notebooks/msg": {},
	// The server process: the HTTP face over all of the above but the
	// kernel process, and its rooms.
	"server":             {"kernel/wire", "notebooks/...", "timeline/...", "web", "server/...", "probe"},
	"server/kernels":     {"kernel/wire", "notebooks/msg", "timeline/..."}, // kernelspecs and the Manager of kernel processes
	"server/live":        {"timeline", "timeline/event", "timeline/lod", "timeline/traces", "server/httperr"},
	"server/httperr":     {}, // the one error vocabulary of the server's routes and live's
	"server/hub":         {"notebooks/msg"},
	"server/hub/hubtest": {"server/hub"},
	"web":                {}, // the pages know no domain type
	// Leaves and helpers for tests (see leaves and testOnly).
	"internal":                 {},
	"timeline/event/eventtest": {"timeline/event"},
	"notebooks/msg/msgtest":    {"notebooks/msg"},
	"engine/device/devicetest": {"engine/device"},
}

// leaves may be imported by any package: they import only the standard
// library (see stdlibOnly). internal/ holds them, and the helpers of
// tests.
var leaves = []string{"internal/units", "internal/serverinfo"}

// sealed lists packages that other programs import, which may import
// exactly their policy line, not the leaves: what a Go service links
// when it imports the probe.
var sealed = []string{"probe"}

// engineSide lists the packages that may reach the engine or Starlark
// (kernelOnly), directly or through any chain of project packages: the
// kernel process, the engine itself, and the binaries and tests that
// link them. Every other package runs in the server or below it.
var (
	engineSide = []string{"kernel", "engine/...", "cmd/...", "test/...", "deploy", "examples/..."}
	kernelOnly = []string{module + "/engine/...", module + "/kernel", "go.starlark.net/..."}
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
// library. (web imports templ, and internal/browsertest chromedp, but
// nothing of Linger.)
var stdlibOnly = []string{"timeline/event", "probe", "timeline/pickle", "internal/units", "internal/serverinfo", "internal/testbin", "internal/redistest", "internal/promtest", "server/httperr", "timeline/event/eventtest", "engine/device/devicetest"}

// testOnly lists the helpers for tests, which no package may import
// outside its _test.go files.
var testOnly = []string{"timeline/event/eventtest", "timeline/goheap/goheaptest", "server/hub/hubtest", "notebooks/msg/msgtest", "internal/testbin", "internal/redistest", "internal/promtest", "internal/browsertest", "engine/device/devicetest"}

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
	extra := leaves
	if slices.Contains(sealed, r) {
		extra = nil
	}
	for _, p := range slices.Concat(policy[r], extra) {
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
		{"cmd/internal/cli", "server", false},
		{"cmd/internal/cli", "engine/alloc", true},
		{"server/live", "server/httperr", true},
		{"server/live", "timeline/traces", true},
		{"server/live", "timeline/analyze", false},
		{"server/httperr", "server/kernels", false},
		{"nosuch", "engine", false},
		{"server", "engine", false},
		{"server", "engine/alloc", false},
		{"server", "server/kernels", true},
		{"server", "kernel/wire", true},
		{"server", "kernel", false},
		{"server/live", "kernel", false},
		{"server/kernels", "kernel/wire", true},
		{"server/kernels", "timeline", true},
		{"server/kernels", "kernel", false},
		{"server/kernels", "engine", false},
		{"server/kernels", "engine/alloc", false},
		{"kernel/wire", "engine/alloc", false},
		{"kernel/wire", "server/kernels", false},
		{"kernel/wire", "kernel", false},
		{"kernel", "engine/alloc", true},
		{"kernel", "server/kernels", false},
		{"kernel", "server", false},
		{"kernel", "internal/units", true},
		{"engine", "internal/units", true},
		{"internal/units", "timeline/event", false},
		{"timeline/traces", "server/live", false},
		{"notebooks/contents", "engine", false},
		{"notebooks/contents", "notebooks/nbformat", true},
		{"timeline/memstate", "timeline", false},
		{"timeline/lod", "timeline/pyramid", true},
		{"timeline/pyramid", "timeline", false},
		{"probe", "timeline/event", true},
		{"probe", "timeline", false},
		{"probe", "internal/units", false},
		{"probe", "server", false},
		{"server", "probe", true},
		{"timeline", "probe", false},
		{"examples/gateway", "probe", true},
		{"examples/gateway", "engine", true},
		{"examples/gateway/cmd/gateway", "examples/gateway", true},
		{"examples/gateway", "server", false},
		{"examples/gateway", "kernel", false},
		{"examples/gateway", "timeline/analyze", false},
		{"probe", "examples/gateway", false},
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

// TestServerSide checks that no package but engineSide's reaches the
// engine or Starlark, directly or through any chain of project packages:
// the server runs neither, nor anything below it.
func TestServerSide(t *testing.T) {
	imports := moduleImports(t)
	if imports["server"] == nil || imports["kernel"] == nil {
		t.Fatal("server or kernel not found: the check below would prove nothing")
	}
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		if slices.ContainsFunc(engineSide, func(p string) bool { return matches(p, pkg) }) {
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
		"cmd/linger": {"linger/kernel": true},
		"kernel":     {"linger/engine": true},
		"engine":     {"linger/engine/device/cuda": true},
	}
	want := "kernel → engine → linger/engine/device/cuda"
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
		"server":         {"linger/server/kernels": true, "linger/timeline": true},
		"server/kernels": {"linger/kernel/wire": true, "linger/timeline": true},
		"kernel/wire":    {"linger/kernel": true},
		"kernel":         {"go.starlark.net/starlark": true},
		"timeline":       {"linger/timeline/event": true},
	}
	want := "server/kernels → kernel/wire → linger/kernel"
	if got := strings.Join(kernelOnlyChain(imports, "server"), " → "); got != want {
		t.Errorf("server: chain %q, want %q", got, want)
	}
	imports["kernel/wire"] = map[string]bool{"encoding/json": true}
	imports["server/kernels"]["linger/engine/alloc"] = true
	if got := strings.Join(kernelOnlyChain(imports, "server"), " → "); got != "server/kernels → linger/engine/alloc" {
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
