package analyze

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"linger/engine"
	"linger/timeline/event"
)

// Findings is Report without its per-site totals and the sites only they
// name: every other figure, row, name and site is Report's, on traces with
// lingering objects (kept caches, leaked masks), growth and duplicates.
func TestFindingsAreReport(t *testing.T) {
	traces := map[string]*memTrace{
		"growth":   keepPerStep(20, event.CategoryKVCache, 4*MiB, 3, 64*MiB).tr,
		"category": keepPerStep(20, event.CategoryKVCache, 8<<10, 8, 0).tr,
	}
	e, tr := newEngine(t, "meta", engine.KVPaged)
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: tokens(70), ChunkSize: 16, MaxNewTokens: 20, KeepCache: true}); err != nil {
		t.Fatal(err)
	}
	traces["kept cache"] = tr
	e, tr, em := dupEngine(t, engine.KVContiguous)
	cache, err := e.NewKVCache(2048)
	if err != nil {
		t.Fatal(err)
	}
	for pos := 0; pos < 2048; pos += 64 {
		sc := em.Begin(event.ScopeStep, "chunk")
		m, err := engine.CausalMask(e.Allocator(), 64, pos+64, pos, engine.BF16, event.ScopeStep, "mask")
		if err != nil {
			t.Fatal(err)
		}
		if pos >= 1024 {
			m.Free() // else kept: it lingers; every one a duplicate
		}
		em.End(sc)
	}
	cache.Free()
	traces["masks"] = tr
	for name, tr := range traces {
		t.Run(name, func(t *testing.T) {
			a := New(Options{})
			if err := tr.Replay(func(e event.Event) error { a.Add(e); return nil }); err != nil {
				t.Fatal(err)
			}
			whole, findings := a.Report(tr), a.Findings(tr)
			if len(whole.Sites) == 0 || len(findings.Sites) != 0 {
				t.Fatalf("%d per-site totals in the report, %d in its findings; want some, none", len(whole.Sites), len(findings.Sites))
			}
			if len(whole.Lingering.Objects)+len(whole.Growth)+len(whole.Duplicates) == 0 {
				t.Fatalf("nothing found: %+v", whole)
			}
			t.Logf("%d lingering, %d growth, %d duplicates, %d peak sites, %d of %d sites in the table", len(whole.Lingering.Objects), len(whole.Growth), len(whole.Duplicates), len(whole.Peak.BySite), len(findings.SiteTable), len(whole.SiteTable))
			want := asJSON(t, whole)
			want["sites"] = []any{}
			named := map[float64]bool{}
			siteIDs(want, named)
			table := want["site_table"].([]any)
			want["site_table"] = slices.DeleteFunc(table, func(s any) bool { return !named[s.(map[string]any)["id"].(float64)] })
			if got := asJSON(t, findings); !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("findings:\n%s\nwant the report's less its per-site totals:\n%s", g, w)
			}
		})
	}
}

func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// siteIDs adds the site ids v's rows name (site_id), outside its
// site_table, to ids.
func siteIDs(v any, ids map[float64]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "site_id" {
				ids[x.(float64)] = true
			} else if k != "site_table" {
				siteIDs(x, ids)
			}
		}
	case []any:
		for _, x := range v {
			siteIDs(x, ids)
		}
	}
}
