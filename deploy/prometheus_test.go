package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"linger/internal/promtest"
)

// The alerting and recording rules (deploy/prometheus/linger-rules.yml)
// are valid as Prometheus reads them, and their unit tests pass: each
// alert fires on series shaped as the failure it names and stays silent
// on healthy ones (linger-rules.test.yml).
func TestPrometheusRules(t *testing.T) {
	tool := promtest.Promtool(t)
	dir := filepath.Join("prometheus")
	for _, args := range [][]string{{"check", "rules", "linger-rules.yml"}, {"test", "rules", "linger-rules.test.yml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// goCollector are the series of client_golang's Go collector the rules
// and the dashboard read (its names, from its collector's source:
// go_collector.go and the runtime/metrics mapping).
var goCollector = []string{"go_memstats_heap_inuse_bytes", "go_gc_duration_seconds", "go_gc_pauses_seconds_bucket", "go_sched_pauses_total_gc_seconds_bucket", "go_goroutines"}

// lingerMetrics are the metric names Linger's code exports: every
// "linger_…" string of its non-test Go source (the server's, the
// probe's, linger watch's metrics are declared by name there).
func lingerMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	name := regexp.MustCompile(`"(linger_[a-z0-9_]+)"`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// series are the metric names a PromQL expression reads: the
// identifiers that begin with linger_, linger: or go_ (a histogram's
// _bucket as such).
func series(expr string) []string {
	return regexp.MustCompile(`\b(?:linger[_:]|go_)[a-zA-Z0-9_:]*`).FindAllString(expr, -1)
}

// The rules and the dashboard read only series that exist: a Go
// collector's, one Linger's code exports, or a recording rule of
// linger-rules.yml. A typo in a metric name would make an alert that
// never fires, silently.
func TestPrometheusNames(t *testing.T) {
	known := lingerMetrics(t)
	for _, n := range goCollector {
		known[n] = true
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Record, Alert, Expr string
			}
		}
	}
	b, err := os.ReadFile(filepath.Join("prometheus", "linger-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	for _, want := range []string{"linger_source_allocated_bytes", "linger_probe_allocations_total", "linger_watch_heap_inuse_bytes"} {
		if !known[want] {
			t.Fatalf("%s is not among the names found in the source (%d found): the scan is broken", want, len(known))
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, s := range series(r.Expr) {
				if !known[s] {
					t.Errorf("rule %s%s reads %s, which nothing exports", r.Record, r.Alert, s)
				}
			}
		}
	}
	for _, e := range dashboardExprs(t) {
		for _, s := range series(e.expr) {
			if !known[s] {
				t.Errorf("dashboard panel %q reads %s, which nothing exports", e.panel, s)
			}
		}
	}
}

type panelExpr struct{ panel, expr string }

// dashboardExprs reads deploy/prometheus/linger-dashboard.json as Grafana
// reads a dashboard: its panels, each with a unique id and a place on the
// grid, their queries on the dashboard's Prometheus data source.
func dashboardExprs(t *testing.T) []panelExpr {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", "linger-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID, Title    string
		SchemaVersion int
		Templating    struct {
			List []struct{ Name, Type, Query any }
		}
		Panels []struct {
			ID         int
			Type       string
			Title      string
			GridPos    struct{ X, Y, W, H int }
			Datasource struct{ Type, UID string }
			Targets    []struct{ RefID, Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("linger-dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q, title %q, schemaVersion %d, %d panels: want all set, a current schema", d.UID, d.Title, d.SchemaVersion, len(d.Panels))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct{ Name, Type, Query any }) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Error("the dashboard has no Prometheus data source variable named datasource")
	}
	ids := map[int]bool{}
	var out []panelExpr
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: grid position %+v off the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %+v, %d queries; want the dashboard's Prometheus and a query", p.Title, p.Datasource, len(p.Targets))
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %q: query %+v: want an expression and a refId of its own", p.Title, q)
			}
			refs[q.RefID] = true
			out = append(out, panelExpr{p.Title, q.Expr})
		}
	}
	return out
}

// Every query of the dashboard is PromQL Prometheus accepts: promtool
// checks them as recording rules (with $job as Grafana would put it).
func TestDashboardQueries(t *testing.T) {
	tool := promtest.Promtool(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	exprs := dashboardExprs(t)
	for i, e := range exprs {
		q := strings.ReplaceAll(e.expr, "$job", ".*")
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, strconv.Quote(q))
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "check", "rules", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", len(exprs))) {
		t.Errorf("promtool check rules on the dashboard's %d queries: %v\n%s", len(exprs), err, out)
	}
}
