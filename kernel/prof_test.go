package kernel

import (
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event"
)

// displays returns the data of the display_data outputs among ms.
func displays(ms []*msg.Message) []map[string]any {
	var out []map[string]any
	for _, m := range ms {
		if m.Header.MsgType != "display_data" {
			continue
		}
		var c struct {
			Data map[string]any `json:"data"`
		}
		if err := m.DecodeContent(&c); err == nil {
			out = append(out, c.Data)
		}
	}
	return out
}

// profileBundle returns the one display_data among ms that is a profile.
func profileBundle(t *testing.T, ms []*msg.Message) map[string]any {
	t.Helper()
	for _, d := range displays(ms) {
		if _, ok := d[flameMime]; ok {
			return d
		}
	}
	t.Fatalf("no profile among the outputs: %v", displays(ms))
	return nil
}

var downloadLink = regexp.MustCompile(`<a download="([^"]+)" href="data:application/octet-stream;base64,([^"]+)">`)

// downloaded parses the pprof file the bundle's HTML offers.
func downloaded(t *testing.T, d map[string]any) (string, *profile.Profile) {
	t.Helper()
	m := downloadLink.FindStringSubmatch(d["text/html"].(string))
	if m == nil {
		t.Fatalf("no download link in the HTML")
	}
	raw, err := base64.StdEncoding.DecodeString(m[2])
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(raw)
	if err != nil {
		t.Fatalf("the downloaded profile does not parse: %v", err)
	}
	return m[1], p
}

// wellFormed checks that s is well-formed XML with one root svg element,
// and returns how many rect and title elements it has.
func wellFormed(t *testing.T, s string) (rects, titles int) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	d.Strict = true
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well formed: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element %v, want svg", tok.Name)
			}
			depth++
			switch tok.Name.Local {
			case "rect":
				rects++
			case "title":
				titles++
			}
		case xml.EndElement:
			depth--
		}
	}
	return rects, titles
}

// funcTime sums the time (ns) of the samples whose stack holds fn, and of
// those whose stack holds fn with wait as their innermost frame.
func funcTime(p *profile.Profile, fn, wait string) (total, waiting int64) {
	for _, s := range p.Sample {
		leaf := s.Location[0].Line[0].Function.Name
		for _, loc := range s.Location {
			if loc.Line[0].Function.Name == fn {
				total += s.Value[1]
				if leaf == wait {
					waiting += s.Value[1]
				}
				break
			}
		}
	}
	return total, waiting
}

// findNode returns the first node of the flame JSON named name, depth
// first, and the names on its path.
func findNode(n map[string]any, name string, path []string) (map[string]any, []string) {
	path = append(path, n["n"].(string))
	if n["n"] == name {
		return n, path
	}
	cs, _ := n["c"].([]any)
	for _, c := range cs {
		if found, p := findNode(c.(map[string]any), name, path); found != nil {
			return found, p
		}
	}
	return nil, nil
}

// TestProfCell: a %%prof cell running a cpu prefill shows its wall-clock
// profile: the pprof file parses and has the engine's matmul with time
// in it, computing and (the prefill waiting on its workers) off-CPU; the
// flame tree has them under the interpreter's folded frames; the SVG is
// well formed with a tooltip per frame; the text names the top functions.
func TestProfCell(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		// matmulT spreads a prefill's matmuls over GOMAXPROCS workers
		// and waits for them: the wait is what fgprof adds.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	c := startKernel(t)
	c.exec(`e = engine(model="small", device="cpu")`)
	start := time.Now()
	ms := c.exec("%%prof\nr = e.generate(prompt_tokens=512, chunk_size=128)\nr.prompt_tokens")
	t.Logf("the %%%%prof cell took %s", time.Since(start))
	if r := msgtest.Find(ms, "execute_result"); fmt.Sprint(r["data"]) != "map[text/plain:512]" {
		t.Fatalf("result %v, want 512 (the cell's value)", r)
	}
	d := profileBundle(t, ms)
	for _, mime := range []string{"text/plain", "text/html", "image/svg+xml", flameMime} {
		b, _ := json.Marshal(d[mime])
		t.Logf("%s: %d bytes", mime, len(b))
	}
	file, p := downloaded(t, d)
	if file != "cell-In2.pprof" {
		t.Errorf("file %q, want cell-In2.pprof", file)
	}
	total, waiting := funcTime(p, "linger/engine.matmulT", "runtime.gopark")
	if ranges, _ := funcTime(p, "linger/engine.matmulRange", ""); total == 0 || waiting == 0 || ranges == 0 {
		t.Errorf("matmulT %d ns, of which waiting %d ns; matmulRange %d ns: want time in each", total, waiting, ranges)
	}

	fj := d[flameMime].(map[string]any)
	root := fj["root"].(map[string]any)
	if root["n"] != "In [2]" || root["v"].(float64) <= 0 || fj["off_cpu_ns"].(float64) <= 0 {
		t.Errorf("flame root %v %v, off-CPU %v", root["n"], root["v"], fj["off_cpu_ns"])
	}
	mt, path := findNode(root, "linger/engine.matmulT", nil)
	if mt == nil || mt["v"].(float64) <= 0 || !strings.HasSuffix(mt["f"].(string), "engine/kernel.go:"+fmt.Sprint(lineOf(t, p, "linger/engine.matmulT"))) {
		t.Errorf("matmulT in the flame: %v", mt)
	} else if path[1] != "(interpreter frames folded)" || !strings.Contains(strings.Join(path, " "), "linger/kernel.engineGenerate") {
		t.Errorf("matmulT's path %v: want the folded interpreter, then the generate binding", path)
	}
	if w, _ := findNode(mt, "sync.(*WaitGroup).Wait", nil); w == nil || w["v"].(float64) <= 0 {
		t.Errorf("no wait under matmulT in the flame: %v", w)
	}
	if n, _ := findNode(root, "linger/kernel.(*kernelProc).watch", nil); n != nil {
		t.Errorf("the kernel's watchdog is in the cell's flame: %v", n)
	}

	rects, titles := wellFormed(t, d["image/svg+xml"].(string))
	if rects < 10 || titles != rects { // the background has no title, the document has one
		t.Errorf("SVG: %d rects, %d titles", rects, titles)
	}
	if svg := d["image/svg+xml"].(string); !strings.Contains(svg, "matmulT") || !strings.Contains(d["text/html"].(string), svg) {
		t.Errorf("the SVG does not name matmulT, or the HTML does not hold it")
	}
	text := d["text/plain"].(string)
	if !strings.Contains(text, "Wall-clock profile of In [2] (fgprof)") || !strings.Contains(text, "engine.") {
		t.Errorf("text/plain:\n%s", text)
	}
	t.Logf("text/plain:\n%s", text)
}

// lineOf returns the line of fn's hottest location in p.
func lineOf(t *testing.T, p *profile.Profile, fn string) int64 {
	lines := map[int64]int64{}
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			if ln := loc.Line[0]; ln.Function.Name == fn {
				lines[ln.Line] += s.Value[1]
				break
			}
		}
	}
	var best, at int64
	for l, v := range lines {
		if v > best || v == best && l < at {
			best, at = v, l
		}
	}
	return at
}

// TestProfLines: %%prof keeps the cell's line numbers: an error names its
// line, an allocation's site its line; the profile is shown when the
// cell fails too.
func TestProfLines(t *testing.T) {
	c := startKernel(t)
	ms := c.exec("%%prof\nt = tensor([1024, 64], label=\"at3\")\n\nx = [i * i for i in range(300000)]\nfail(\"boom\")")
	r := msgtest.Find(ms, "execute_reply")
	tb := fmt.Sprint(r["traceback"])
	if r["status"] != "error" || !strings.Contains(tb, "Cell In[1], line 5") {
		t.Errorf("reply %v: want the error at line 5", r)
	}
	if len(displays(ms)) != 1 {
		t.Errorf("a failed %%%%prof cell showed %d outputs, want its profile", len(displays(ms)))
	}
	c.exec("1")
	allocs := c.log.Labelled(event.KindAlloc, "at3")
	if len(allocs) != 1 {
		t.Fatalf("%d allocations labelled at3", len(allocs))
	}
	if s, _ := c.log.Site(allocs[0].Site); s.Line != 2 {
		t.Errorf("the tensor's site is line %d, want 2", s.Line)
	}
	// A cell that is not one: %%prof not alone on the first line.
	if r := msgtest.Find(c.exec("x = 1\n%%prof"), "execute_reply"); r["ename"] != "SyntaxError" {
		t.Errorf("%%%%prof on line 2: %v", r)
	}
}

// TestProfCall: prof(fn, *args, **kwargs) returns fn's result and shows
// fn's profile; a failing fn fails the call after its profile is shown.
func TestProfCall(t *testing.T) {
	c := startKernel(t)
	c.exec(`e = engine(model="tiny", device="cpu")
def run(n, chunk=32):
    return e.generate(prompt_tokens=n, chunk_size=chunk).prompt_tokens
def busy():
    s = 0
    for i in range(400000):
        s += i
    return s`)
	ms := c.exec("prof(run, 256, chunk=64)")
	if r := msgtest.Find(ms, "execute_result"); fmt.Sprint(r["data"]) != "map[text/plain:256]" {
		t.Errorf("prof(run, 256) = %v, want 256", r)
	}
	d := profileBundle(t, ms)
	if file, _ := downloaded(t, d); file != "prof-run-1.pprof" {
		t.Errorf("file %q", file)
	}
	if root := d[flameMime].(map[string]any)["root"].(map[string]any); root["n"] != "prof(run)" {
		t.Errorf("root %v", root["n"])
	}
	// Starlark's own work: all the interpreter's, folded.
	d = profileBundle(t, c.exec("prof(busy)"))
	root := d[flameMime].(map[string]any)["root"].(map[string]any)
	if n, _ := findNode(root, "(interpreter frames folded)", nil); n == nil || n["v"].(float64) < 0.5*root["v"].(float64) {
		t.Errorf("busy's time is not the interpreter's: %v of %v", n, root["v"])
	}
	if r := msgtest.Find(c.exec("prof(lambda: fail(\"inner\"))"), "execute_reply"); r["status"] != "error" || !strings.Contains(fmt.Sprint(r["evalue"]), "inner") {
		t.Errorf("prof of a failing fn: %v", r)
	}
	if r := msgtest.Find(c.exec("prof(1)"), "execute_reply"); !strings.Contains(fmt.Sprint(r["evalue"]), "fn must be callable") {
		t.Errorf("prof(1): %v", r)
	}
}

func TestCutProfMagic(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"%%prof\nx = 1", "\nx = 1", true},
		{"%%prof  \r\nx = 1\ny", "\nx = 1\ny", true},
		{"%%prof", "", true},
		{"x = 1\n%%prof", "x = 1\n%%prof", false},
		{"%%profile\nx", "%%profile\nx", false},
		{" %%prof\nx", " %%prof\nx", false},
	} {
		got, ok := cutProfMagic(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("cutProfMagic(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// BenchmarkProfPrefill is a cpu prefill of 512 tokens (the small model,
// chunks of 128) with and without %%prof: compare the two in one run for
// what fgprof's sampling (a goroutine profile 99 times a second) and the
// profile's output cost the cell.
func BenchmarkProfPrefill(b *testing.B) {
	c := startKernel(b)
	c.exec(`e = engine(model="small", device="cpu")`)
	for _, magic := range []string{"", "%%prof\n"} {
		b.Run(fmt.Sprintf("prof=%v", magic != ""), func(b *testing.B) {
			for b.Loop() {
				if r := msgtest.Find(c.exec(magic+"r = e.generate(prompt_tokens=512, chunk_size=128)"), "execute_reply"); r["status"] != "ok" {
					b.Fatal(fmt.Sprint(r))
				}
			}
		})
	}
}
