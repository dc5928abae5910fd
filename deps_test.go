package linger_test

// This file is a statement of policy, as go/build/deps_test.go is for Go:
// the import direction of DESIGN.md's package table. Arrows point down only.
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
	"cmd/linger":       {"*"},
	"test":             {"*"}, // end-to-end tests driving the built binary and a browser
	"server":           {"notebooks/...", "timeline/...", "web/...", "server/..."},
	"server/live":      {"timeline", "timeline/event", "timeline/lod"},
	"web":              {"internal/units"},
	"notebooks":        {"engine/...", "timeline/...", "notebooks/...", "internal/units"},
	"engine":           {"engine/...", "timeline/event"},
	"engine/alloc":     {"engine/device", "timeline/event", "internal/units"},
	"engine/device":    {},
	"engine/tokenizer": {"timeline/event", "engine/tokenizer/..."},
	// The rules that turn events into memory figures, which analyze, lod
	// and export share; and go generate's writer of the browser's copy of
	// the wire constants (web/ui/src/timeline/wire.gen.js).
	"timeline/memstate":               {"timeline/event"},
	"timeline/event/internal/genwire": {"timeline/event"},
	// The trace log, what reads it, and the event model.
	"timeline":         {"timeline/event"},
	"timeline/analyze": {"timeline/event", "timeline/memstate", "internal/units"},
	"timeline/lod":     {"timeline", "timeline/event", "timeline/memstate"}, // level-of-detail queries over a trace log
	"timeline/export":  {"timeline/event", "timeline/memstate", "timeline/analyze"},
	"timeline/event":   {},
	"internal/units":   {}, // byte sizes read and printed, for every layer
}

// stdlibOnly lists packages that may import nothing outside the standard
// library. (web imports templ, but nothing of Linger.)
var stdlibOnly = []string{"timeline/event", "internal/units"}

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
		{"nosuch", "engine", false},
	} {
		if got := allowed(c.pkg, c.dep); got != c.ok {
			t.Errorf("allowed(%q, %q) = %v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}

// TestDependencyPolicy reads the imports of every non-test Go file in the
// module, whatever its build tags (the cuda device too), and checks them
// against policy.
func TestDependencyPolicy(t *testing.T) {
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
				if rel := strings.TrimPrefix(dep, module+"/"); !allowed(pkg, rel) {
					t.Errorf("%s imports %s, which the policy forbids", pkg, dep)
				}
			case stdOnly:
				t.Errorf("%s imports %s, but may use only the standard library", pkg, dep)
			}
		}
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat("go.mod"); err != nil {
		panic("deps_test must run at the module root")
	}
	os.Exit(m.Run())
}
