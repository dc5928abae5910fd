package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

// render renders c and parses the result as a full document.
func render(t *testing.T, c templ.Component) *html.Node {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	doc, err := html.Parse(&buf)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return doc
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// byTestID returns the elements under n whose data-testid is id, in
// document order.
func byTestID(n *html.Node, id string) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode {
			if v, _ := attr(d, "data-testid"); v == id {
				out = append(out, d)
			}
		}
	}
	return out
}

func one(t *testing.T, n *html.Node, id string) *html.Node {
	t.Helper()
	got := byTestID(n, id)
	if len(got) != 1 {
		t.Fatalf("want one data-testid=%q, got %d", id, len(got))
	}
	return got[0]
}

func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// plotSVG is an image/svg+xml output, with what must never reach the
// page's DOM.
const plotSVG = `<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><title>mémoire</title><script>alert(1)</script><rect width="8" height="8" fill="#fff"/></svg>`

func TestNotebook(t *testing.T) {
	v := NotebookView{
		Page: Page{Base: "/base/"},
		Path: "demo/leak.ipynb",
		Cells: []CellView{
			{ID: "intro", Type: CellMarkdown, Source: "# KV cache leak\n<script>alert(1)</script>"},
			{ID: "c1", Type: CellCode, Source: "x = 1 + 1\nprint(x)", ExecutionCount: 3, Outputs: []OutputView{
				{Type: OutputStream, Name: "stdout", Text: "2\n"},
				{Type: OutputExecuteResult, Text: "2"},
			}},
			{ID: "c2", Type: CellCode, Source: "fail()", ExecutionCount: 4, Outputs: []OutputView{
				{Type: OutputError, EName: "NameError", EValue: "undefined: fail", Traceback: []string{"\x1b[31mTraceback\x1b[0m", "  cell c2, line 1"}},
			}},
			{ID: "c3", Type: CellCode, Source: "plot()", Outputs: []OutputView{
				{Type: OutputDisplayData, PNG: "iVBORw0KGgo=", Text: "<Figure>"},
				{Type: OutputDisplayData, PNG: "javascript:alert(1)", Text: "fallback"},
			}},
			{ID: "c4", Type: CellCode, Source: "timeline.plot()", ExecutionCount: 5, Outputs: []OutputView{
				{Type: OutputExecuteResult, SVG: plotSVG, PNG: "iVBORw0KGgo=", Text: "memory over the session: peak 20.0 MiB allocated, no lingering objects"},
			}},
		},
	}
	doc := render(t, Notebook(v))

	t.Run("shell", func(t *testing.T) {
		if got := text(one(t, doc, "notebook-name")); got != "leak.ipynb" {
			t.Errorf("notebook-name = %q", got)
		}
		for _, id := range []string{"toolbar", "run", "run-all", "interrupt", "restart", "restart-run-all", "clear-outputs", "shortcuts", "save", "kernel-status", "save-state", "banner"} {
			one(t, doc, id)
		}
		if _, hidden := attr(one(t, doc, "banner"), "hidden"); !hidden {
			t.Error("banner is shown before anything went wrong")
		}
		tl := one(t, doc, "timeline")
		if p, _ := attr(tl, "data-notebook-path"); p != "demo/leak.ipynb" {
			t.Errorf("timeline data-notebook-path = %q", p)
		}
		if p, _ := attr(one(t, doc, "cells"), "data-path"); p != "demo/leak.ipynb" {
			t.Errorf("cells data-path = %q", p)
		}
	})

	cells := byTestID(doc, "cell")
	if len(cells) != 5 {
		t.Fatalf("got %d cells, want 5", len(cells))
	}
	t.Run("markdown", func(t *testing.T) {
		c := cells[0]
		if ty, _ := attr(c, "data-cell-type"); ty != CellMarkdown {
			t.Errorf("type = %q", ty)
		}
		if id, _ := attr(c, "id"); id != "cell-intro" {
			t.Errorf("id = %q", id)
		}
		// The source is text: the script tag in it must not become one.
		for d := range c.Descendants() {
			if d.Type == html.ElementNode && d.Data == "script" {
				t.Fatal("markdown source rendered as HTML")
			}
		}
		if got := text(one(t, c, "source")); !strings.Contains(got, "<script>") {
			t.Errorf("source = %q", got)
		}
		if len(byTestID(c, "outputs")) != 0 {
			t.Error("markdown cell has an outputs area")
		}
	})
	t.Run("code", func(t *testing.T) {
		c := cells[1]
		if got := text(one(t, c, "prompt")); got != "[3]:" {
			t.Errorf("prompt = %q", got)
		}
		if got := text(one(t, c, "source")); got != "x = 1 + 1\nprint(x)" {
			t.Errorf("source = %q", got)
		}
		s := one(t, c, "output-stream")
		if n, _ := attr(s, "data-name"); n != "stdout" || text(s) != "2\n" {
			t.Errorf("stream %q = %q", n, text(s))
		}
		if got := text(one(t, c, "output-text")); got != "2" {
			t.Errorf("result = %q", got)
		}
	})
	t.Run("error", func(t *testing.T) {
		c := cells[2]
		one(t, c, "output-error")
		if got := text(one(t, c, "ename")); got != "NameError" {
			t.Errorf("ename = %q", got)
		}
		if got := text(one(t, c, "evalue")); got != "undefined: fail" {
			t.Errorf("evalue = %q", got)
		}
		if got := text(one(t, c, "traceback")); got != "Traceback\n  cell c2, line 1" {
			t.Errorf("traceback = %q (ANSI escapes must be stripped)", got)
		}
	})
	t.Run("image", func(t *testing.T) {
		c := cells[3]
		if got := text(one(t, c, "prompt")); got != "[ ]:" {
			t.Errorf("prompt = %q", got)
		}
		img := one(t, c, "output-image")
		if src, _ := attr(img, "src"); src != "data:image/png;base64,iVBORw0KGgo=" {
			t.Errorf("src = %q", src)
		}
		// Not base64: shown as its text, never as a URL.
		if got := text(one(t, c, "output-text")); got != "fallback" {
			t.Errorf("fallback = %q", got)
		}
	})
	t.Run("svg", func(t *testing.T) {
		c := cells[4]
		img := one(t, c, "output-image")
		src, _ := attr(img, "src")
		b64, ok := strings.CutPrefix(src, "data:image/svg+xml;base64,")
		if got, err := base64.StdEncoding.DecodeString(b64); !ok || err != nil || string(got) != plotSVG {
			t.Errorf("src = %q, want the SVG as a base64 data URL", src)
		}
		if alt, _ := attr(img, "alt"); alt != "memory over the session: peak 20.0 MiB allocated, no lingering objects" {
			t.Errorf("alt = %q, want the text/plain", alt)
		}
		for d := range c.Descendants() {
			if d.Type == html.ElementNode && (d.Data == "svg" || d.Data == "script") {
				t.Errorf("the SVG was inlined into the page: <%s>", d.Data)
			}
		}
	})
	t.Run("assets", func(t *testing.T) {
		var scripts []string
		for d := range doc.Descendants() {
			if d.Type == html.ElementNode && d.Data == "script" {
				src, _ := attr(d, "src")
				scripts = append(scripts, src)
			}
		}
		if len(scripts) == 0 || !strings.HasPrefix(scripts[0], "/base/static/notebook.js?v=") {
			t.Errorf("scripts = %q, want notebook.js first under the base URL with a hash", scripts)
		}
	})
}

// TestKernelPicker: the toolbar's picker is a labelled select of the
// server's kernelspecs, showing the one the page starts (the notebook's
// when offered, else the default); with one spec it is disabled, never
// empty; the kernel notice is there, hidden.
func TestKernelPicker(t *testing.T) {
	plain := KernelView{Name: "linger", DisplayName: "Linger (Starlark)", Language: "starlark"}
	cuda := KernelView{Name: "linger-cuda", DisplayName: "Linger (CUDA)", Language: "starlark"}
	type option struct{ Value, Text, Language string }
	for _, tt := range []struct {
		name     string
		kernels  []KernelView
		wants    string
		options  []option
		selected string
		disabled bool
	}{
		{"notebook's spec offered", []KernelView{plain, cuda}, "linger-cuda",
			[]option{{"linger", "Linger (Starlark)", "starlark"}, {"linger-cuda", "Linger (CUDA)", "starlark"}}, "linger-cuda", false},
		{"notebook's spec missing", []KernelView{plain, cuda}, "python3",
			[]option{{"linger", "Linger (Starlark)", "starlark"}, {"linger-cuda", "Linger (CUDA)", "starlark"}}, "linger", false},
		{"no kernelspec in the notebook", []KernelView{plain, cuda}, "",
			[]option{{"linger", "Linger (Starlark)", "starlark"}, {"linger-cuda", "Linger (CUDA)", "starlark"}}, "linger", false},
		{"one spec", []KernelView{plain}, "linger-cuda",
			[]option{{"linger", "Linger (Starlark)", "starlark"}}, "linger", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := NotebookView{Path: "gpu.ipynb", Kernels: tt.kernels, Wants: tt.wants}
			if got := v.KernelName(); got != tt.selected {
				t.Errorf("KernelName() = %q, want %q", got, tt.selected)
			}
			doc := render(t, Notebook(v))
			sel := one(t, doc, "kernel-picker")
			if sel.Data != "select" {
				t.Fatalf("kernel-picker is a <%s>, want a <select>", sel.Data)
			}
			if _, dis := attr(sel, "disabled"); dis != tt.disabled {
				t.Errorf("disabled = %v, want %v", dis, tt.disabled)
			}
			// Labelled: a <label for> its id, in the toolbar.
			id, _ := attr(sel, "id")
			labelled := false
			for d := range one(t, doc, "toolbar").Descendants() {
				if d.Type == html.ElementNode && d.Data == "label" {
					if f, _ := attr(d, "for"); f == id && id != "" && strings.TrimSpace(text(d)) == "Kernel" {
						labelled = true
					}
				}
			}
			if !labelled {
				t.Errorf("no <label for=%q>Kernel</label> in the toolbar", id)
			}
			var got []option
			var selected []string
			for d := range sel.Descendants() {
				if d.Type != html.ElementNode || d.Data != "option" {
					continue
				}
				val, _ := attr(d, "value")
				lang, _ := attr(d, "data-language")
				got = append(got, option{val, text(d), lang})
				if _, ok := attr(d, "selected"); ok {
					selected = append(selected, val)
				}
			}
			if !slices.Equal(got, tt.options) {
				t.Errorf("options %q, want %q", got, tt.options)
			}
			if !slices.Equal(selected, []string{tt.selected}) {
				t.Errorf("selected %q, want %q", selected, tt.selected)
			}
			notice := one(t, doc, "kernel-notice")
			if _, hidden := attr(notice, "hidden"); !hidden {
				t.Error("the kernel notice shows before the script said anything")
			}
			if r, _ := attr(notice, "role"); r != "status" {
				t.Errorf("kernel notice role = %q, want status", r)
			}
			one(t, notice, "kernel-notice-text")
			one(t, notice, "kernel-notice-dismiss")
		})
	}
	t.Run("no specs", func(t *testing.T) {
		if got := byTestID(render(t, Notebook(NotebookView{Path: "a.ipynb"})), "kernel-picker"); len(got) != 0 {
			t.Errorf("a picker without specs: %d", len(got))
		}
	})
}

func TestTree(t *testing.T) {
	mod := time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		name    string
		view    TreeView
		entries []string // data-path of each entry
		hrefs   []string
		crumbs  string
	}{
		{
			name: "root",
			view: TreeView{Entries: []EntryView{
				{Name: "scenarios", Path: "scenarios", Type: TypeDirectory, Size: -1, Modified: mod},
				{Name: "leak.ipynb", Path: "leak.ipynb", Type: TypeNotebook, Size: 2048, Modified: mod},
				{Name: "a b.txt", Path: "a b.txt", Type: TypeFile, Size: 12},
			}},
			entries: []string{"scenarios", "leak.ipynb", "a b.txt"},
			hrefs:   []string{"/tree/scenarios", "/notebooks/leak.ipynb", "/api/contents/a%20b.txt?content=1"},
			crumbs:  "root",
		},
		{
			name:   "empty subdirectory",
			view:   TreeView{Page: Page{Base: "/j/"}, Dir: "a/b"},
			crumbs: "root/a/b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := render(t, Tree(tt.view))
			if got := strings.Join(strings.Fields(text(one(t, doc, "breadcrumbs"))), ""); got != tt.crumbs {
				t.Errorf("breadcrumbs = %q, want %q", got, tt.crumbs)
			}
			for _, id := range []string{"new-notebook", "new-folder", "upload", "entries"} {
				one(t, doc, id)
			}
			rows := byTestID(doc, "entry")
			if len(rows) != len(tt.entries) {
				t.Fatalf("got %d entries, want %d", len(rows), len(tt.entries))
			}
			if len(rows) == 0 {
				one(t, doc, "empty")
			}
			for i, r := range rows {
				if p, _ := attr(r, "data-path"); p != tt.entries[i] {
					t.Errorf("entry %d path = %q, want %q", i, p, tt.entries[i])
				}
				if h, _ := attr(one(t, r, "entry-link"), "href"); h != tt.hrefs[i] {
					t.Errorf("entry %d href = %q, want %q", i, h, tt.hrefs[i])
				}
				one(t, r, "rename")
				one(t, r, "delete")
			}
			if len(rows) == 3 {
				if len(byTestID(rows[0], "download")) != 0 {
					t.Error("a directory offers download")
				}
				if got := text(one(t, rows[1], "entry-size")); got != "2.0 KiB" {
					t.Errorf("size = %q", got)
				}
				if !strings.Contains(text(rows[1]), "2026-12-02 09:30") {
					t.Errorf("modified time missing: %q", text(rows[1]))
				}
			}
		})
	}
}

func TestTimeline(t *testing.T) {
	doc := render(t, Timeline(TimelineView{Name: "leak.ltrace", TraceURL: "/api/timeline/traces/leak.ltrace"}))
	tl := one(t, doc, "timeline")
	if u, _ := attr(tl, "data-trace-url"); u != "/api/timeline/traces/leak.ltrace" {
		t.Errorf("data-trace-url = %q", u)
	}
	if got := text(one(t, doc, "trace-name")); got != "leak.ltrace" {
		t.Errorf("trace-name = %q", got)
	}
}

// TestBundles checks that the pages' assets are embedded and that every
// bundle carries the generated-code header (make check-ui checks they are
// fresh).
func TestBundles(t *testing.T) {
	bundles, err := fs.Glob(Static, "*.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"notebook.js", "tree.js"} {
		if !slices.Contains(bundles, want) {
			t.Errorf("%s is not embedded (run make ui)", want)
		}
	}
	for _, name := range append(bundles, "linger.css") {
		t.Run(name, func(t *testing.T) {
			b, err := fs.ReadFile(Static, name)
			if err != nil {
				t.Fatalf("embedded asset: %v", err)
			}
			if strings.HasSuffix(name, ".js") && !strings.HasPrefix(string(b), "// Code generated by web/ui/build.mjs (make ui); DO NOT EDIT.") {
				t.Errorf("%s lacks the generated-code header", name)
			}
			if assetURL("/", name) == "" {
				t.Errorf("%s has no asset URL", name)
			}
		})
	}
}

func TestStaticHandler(t *testing.T) {
	h := http.StripPrefix("/static/", StaticHandler())
	u := assetURL("/", "linger.css")
	tests := []struct {
		url, cache string
		status     int
	}{
		{u, "public, max-age=31536000, immutable", http.StatusOK},
		{"/static/linger.css?v=stale", "no-cache", http.StatusOK},
		{"/static/missing.js", "", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", tt.url, nil))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d", rec.Code, tt.status)
			}
			if got := rec.Header().Get("Cache-Control"); got != tt.cache {
				t.Errorf("Cache-Control = %q, want %q", got, tt.cache)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{-1, ""}, {0, "0 B"}, {1023, "1023 B"}, {1536, "1.5 KiB"}, {3 << 30, "3.0 GiB"}} {
		if got := formatSize(tt.n); got != tt.want {
			t.Errorf("formatSize(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// TestTreeTraces: saved traces are listed with their timeline and compare
// links (names escaped), the older ones counted; none, no section.
func TestTreeTraces(t *testing.T) {
	mod := time.Date(2026, 12, 2, 9, 30, 0, 0, time.UTC)
	doc := render(t, Tree(TreeView{Page: Page{Base: "/j/"}, Traces: []TraceView{
		{Name: "k1 #2.ltrace", Modified: mod, Size: 4096},
		{Name: "k1.ltrace", Modified: mod, Size: 10},
	}, MoreTraces: 3}))
	rows := byTestID(doc, "trace")
	if len(rows) != 2 {
		t.Fatalf("%d trace rows, want 2", len(rows))
	}
	links := byTestID(doc, "trace-link")
	if href, _ := attr(links[0], "href"); href != "/j/timeline/k1%20%232.ltrace" || text(links[0]) != "k1 #2.ltrace" {
		t.Errorf("first trace link %q %q", href, text(links[0]))
	}
	if href, _ := attr(byTestID(doc, "trace-compare")[1], "href"); href != "/j/compare?a=k1.ltrace" {
		t.Errorf("compare link %q", href)
	}
	if got := text(one(t, doc, "more-traces")); !strings.Contains(got, "3 older traces") {
		t.Errorf("more-traces %q", got)
	}
	if n := len(byTestID(render(t, Tree(TreeView{})), "traces")); n != 0 {
		t.Errorf("a page without traces has %d trace sections", n)
	}
}

// TestTracebackOnce: an error's traceback leaves out its last line when
// that repeats the heading ("NameError: …"), so the page says it once.
func TestTracebackOnce(t *testing.T) {
	for _, tt := range []struct {
		tb   []string
		want string
	}{
		{[]string{"Traceback (most recent call last):", "  Cell In [1], line 1, in <toplevel>", "NameError: undefined: x"}, "Traceback (most recent call last):\n  Cell In [1], line 1, in <toplevel>"},
		{[]string{"\x1b[31mNameError\x1b[0m: undefined: x"}, ""},
		{[]string{"Traceback", "  line 1"}, "Traceback\n  line 1"},
	} {
		if got := traceback(OutputView{EName: "NameError", EValue: "undefined: x", Traceback: tt.tb}); got != tt.want {
			t.Errorf("traceback(%q) = %q, want %q", tt.tb, got, tt.want)
		}
	}
}
