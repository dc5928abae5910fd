package kernel

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"html"
	"path"
	"slices"
	"strings"
	"time"

	"linger/timeline/event"
	"linger/timeline/export"
	"linger/timeline/plot"
)

// A flame is a wall-clock profile as a cell shows it: the tree of the
// cell's goroutines' stacks, root first, with the interpreter's own
// frames folded as the exports fold them (export.Fold), and the
// kernel's own goroutines (the event flusher, the watchdog, the pipe's
// reader, an idle executor) left out, counted in other.
//
// fgprof samples runtime.GoroutineProfile, whose records carry neither
// pprof labels nor more than 32 frames, so a goroutine is the cell's by
// what its stack holds: Starlark's interpreter, the engine, or the
// kernel's cell loop; a matmul's workers are the cell's by their engine
// frames.
type flame struct {
	root    *flameNode
	wall    time.Duration
	samples int   // fgprof's ticks over the run
	other   int64 // nanoseconds of the goroutines left out
	// offCPU is the nanoseconds of the cell's goroutines spent waiting
	// (parked: on a channel, a lock, a WaitGroup, a sleep).
	offCPU int64
}

// flameNode is one frame in the tree: a function under its callers.
type flameNode struct {
	name     string
	file     string
	line     int   // the line with the most time
	total    int64 // nanoseconds, this frame and its callees
	self     int64
	wait     int64  // of self, waiting off-CPU
	kind     string // color family: engine, wait, interp, kernel, go
	children []*flameNode
	byName   map[string]*flameNode
	lines    map[int]int64
}

func (n *flameNode) child(name, file string) *flameNode {
	if c, ok := n.byName[name]; ok {
		return c
	}
	c := &flameNode{name: name, file: file, kind: frameKind(name), byName: map[string]*flameNode{}, lines: map[int]int64{}}
	n.byName[name] = c
	n.children = append(n.children, c)
	return c
}

// cellFrame reports whether a frame makes its goroutine the cell's.
func cellFrame(fn string) bool {
	return strings.HasPrefix(fn, "go.starlark.net/") || strings.HasPrefix(fn, "linger/engine") ||
		strings.HasPrefix(fn, "linger/kernel.(*kernelProc).runCell")
}

// leafFrames trims the runtime's frames off the leaf of a stack, and
// says whether the goroutine was waiting. A goroutine parked (in
// runtime.gopark: a channel, a lock, a WaitGroup, a sleep, a select) was
// off-CPU: its runtime frames go, so that its time is the waiting
// function's (sync.(*WaitGroup).Wait, time.Sleep). A running goroutine
// is caught where the goroutine profile preempted it: the preemption's
// own frames go, so that its time is the function that was running.
func leafFrames(frames []event.Frame) ([]event.Frame, bool) {
	if len(frames) == 0 {
		return frames, false
	}
	if frames[0].Func == "runtime.gopark" {
		i := slices.IndexFunc(frames, func(fr event.Frame) bool { return !runtimeInternal(fr.Func) })
		if i < 0 {
			return frames, true
		}
		return frames[i:], true
	}
	for len(frames) > 1 && strings.HasPrefix(frames[0].Func, "runtime.asyncPreempt") {
		frames = frames[1:]
	}
	return frames, false
}

// runtimeInternal reports whether fn is the runtime's way to park a
// goroutine rather than what the goroutine waits on.
func runtimeInternal(fn string) bool {
	return strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "sync.runtime_") ||
		strings.HasPrefix(fn, "internal/sync.") || strings.HasPrefix(fn, "internal/runtime/")
}

// frameKind is the color family of a frame: a node most of whose own
// time is waiting is "wait" instead (newFlame).
func frameKind(fn string) string {
	switch {
	case fn == export.FoldedFunc || strings.HasPrefix(fn, "go.starlark.net/"):
		return "interp"
	case strings.HasPrefix(fn, "linger/engine"):
		return "engine"
	case strings.HasPrefix(fn, "linger/"):
		return "kernel"
	}
	return "go"
}

// newFlame builds the flame of wp, its root named name.
func newFlame(wp *wallProfile, name string) *flame {
	p := wp.prof
	vi := len(p.SampleType) - 1
	for i, st := range p.SampleType {
		if st.Type == "time" {
			vi = i
		}
	}
	f := &flame{root: &flameNode{name: name, kind: "root", byName: map[string]*flameNode{}, lines: map[int]int64{}}, wall: wp.wall}
	if p.Period > 0 {
		f.samples = int((time.Duration(p.DurationNanos) + time.Duration(p.Period)/2) / time.Duration(p.Period))
	}
	var frames []event.Frame
	for _, s := range p.Sample {
		v := s.Value[vi]
		frames = frames[:0]
		for _, loc := range s.Location {
			for _, ln := range loc.Line { // innermost first, inlined calls before their caller
				if ln.Function != nil {
					frames = append(frames, event.Frame{Func: ln.Function.Name, File: ln.Function.Filename, Line: int(ln.Line)})
				}
			}
		}
		if !slices.ContainsFunc(frames, func(fr event.Frame) bool { return cellFrame(fr.Func) }) {
			f.other += v
			continue
		}
		if n := len(frames); n > 1 && frames[n-1].Func == "runtime.goexit" {
			frames = frames[:n-1] // a goroutine's root is the function it runs
		}
		frames, waiting := leafFrames(frames)
		kept, folded := export.Fold(event.Site{Frames: frames}, export.FramesUser)
		n := f.root
		n.total += v
		if folded > 0 {
			n = n.child(export.FoldedFunc, "")
			n.total += v
		}
		for i := len(kept) - 1; i >= 0; i-- {
			n = n.child(kept[i].Func, kept[i].File)
			n.total += v
			n.lines[kept[i].Line] += v
		}
		n.self += v
		if waiting {
			n.wait += v
			f.offCPU += v
		}
	}
	f.root.walk(func(n *flameNode, _ int) {
		if n.wait > 0 && 2*n.wait >= n.self {
			n.kind = "wait"
		}
		slices.SortFunc(n.children, func(a, b *flameNode) int {
			return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.name, b.name))
		})
		var best int64
		for l, v := range n.lines {
			if v > best || v == best && l < n.line {
				n.line, best = l, v
			}
		}
		n.byName, n.lines = nil, nil
	})
	return f
}

// walk calls fn on n and its descendants, depth first, with their depth.
func (n *flameNode) walk(fn func(*flameNode, int)) {
	var rec func(*flameNode, int)
	rec = func(n *flameNode, d int) {
		fn(n, d)
		for _, c := range n.children {
			rec(c, d+1)
		}
	}
	rec(n, 0)
}

// where is a frame's place as its tooltip says it: the file's last two
// path elements and the line.
func (n *flameNode) where() string {
	if n.file == "" {
		return ""
	}
	dir, file := path.Split(n.file)
	return fmt.Sprintf("%s/%s:%d", path.Base(dir), file, n.line)
}

// shortName drops a function's import path but its last element:
// linger/engine.(*Engine).attention → engine.(*Engine).attention.
func shortName(fn string) string {
	if i := strings.LastIndexByte(fn, '/'); i >= 0 && !strings.HasPrefix(fn, "(") {
		return fn[i+1:]
	}
	return fn
}

// topFunc is a function's time over the cell's goroutines.
type topFunc struct {
	name              string
	self, wait, total int64
}

// label is the function's short name, marked when most of its own time
// was spent waiting.
func (t topFunc) label() string {
	if t.wait > 0 && 2*t.wait >= t.self {
		return shortName(t.name) + " (waiting)"
	}
	return shortName(t.name)
}

// top returns the functions with the most self time, at most n.
func (f *flame) top(n int) []topFunc {
	byName := map[string]*topFunc{}
	var rec func(*flameNode, map[string]bool)
	rec = func(nd *flameNode, onPath map[string]bool) {
		t := byName[nd.name]
		if t == nil {
			t = &topFunc{name: nd.name}
			byName[nd.name] = t
		}
		t.self += nd.self
		t.wait += nd.wait
		if !onPath[nd.name] { // recursion counts once
			t.total += nd.total
			onPath[nd.name] = true
			defer delete(onPath, nd.name)
		}
		for _, c := range nd.children {
			rec(c, onPath)
		}
	}
	for _, c := range f.root.children {
		rec(c, map[string]bool{})
	}
	var out []topFunc
	for _, t := range byName {
		if t.self > 0 {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b topFunc) int { return cmp.Or(cmp.Compare(b.self, a.self), strings.Compare(a.name, b.name)) })
	return out[:min(n, len(out))]
}

func seconds(ns int64) string { return fmt.Sprintf("%.3f s", float64(ns)/1e9) }

func percent(v, of int64) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(v) / float64(of)
}

// summary is the profile's text/plain: its wall time, samples, the cell's
// goroutine time and what of it waited, and the top five functions.
func (f *flame) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Wall-clock profile of %s (fgprof): %.3f s wall, %d samples; the cell's goroutines %s (%.0f%% waiting off-CPU)",
		f.root.name, f.wall.Seconds(), f.samples, seconds(f.root.total), percent(f.offCPU, f.root.total))
	if f.other > 0 {
		fmt.Fprintf(&b, "; the kernel's own goroutines (%s) left out", seconds(f.other))
	}
	b.WriteString("\n")
	top := f.top(5)
	if len(top) == 0 {
		b.WriteString("No samples of the cell's goroutines.\n")
		return b.String()
	}
	b.WriteString("      self       %     total  function\n")
	for _, t := range top {
		fmt.Fprintf(&b, "%10s  %5.1f%%  %10s  %s\n", seconds(t.self), percent(t.self, f.root.total), seconds(t.total), t.label())
	}
	return b.String()
}

// SVG geometry.
const (
	flameWidth     = 1200
	flameRow       = 17
	flameHead      = 38
	flameMaxFrames = 2000
	flameCharWidth = 6.6 // of the 11 px monospace labels
)

// flameColors are the fill of each frame kind, a few shades each, dark
// text readable on all of them; the graph has its own light background,
// so it reads the same in a dark theme.
var flameColors = map[string][]string{
	"root":   {"#d9d9d9"},
	"interp": {"#c9c9c9", "#d3d3d3", "#bdbdbd"},
	"engine": {"#f2a65a", "#f5b971", "#ec9346", "#f7c784", "#e98b3c"},
	"kernel": {"#e9d66b", "#f0df86", "#e2cc55"},
	"wait":   {"#8fb8ea", "#a4c6f0", "#7eaae2"},
	"go":     {"#e8a7a0", "#eebcb6", "#df938b"},
}

func (n *flameNode) color() string {
	shades := flameColors[n.kind]
	h := fnv.New32a()
	h.Write([]byte(n.name))
	return shades[int(h.Sum32()%uint32(len(shades)))]
}

// minDrawn is the least total a frame needs to be drawn: a pixel of the
// graph's width, raised until at most flameMaxFrames are drawn.
func (f *flame) minDrawn(width int) int64 {
	px := max(1, (f.root.total+int64(width)-1)/int64(width))
	var totals []int64
	f.root.walk(func(n *flameNode, _ int) {
		if n.total >= px {
			totals = append(totals, n.total)
		}
	})
	if len(totals) <= flameMaxFrames {
		return px
	}
	slices.SortFunc(totals, func(a, b int64) int { return cmp.Compare(b, a) })
	return totals[flameMaxFrames-1]
}

// svg draws the flame as an icicle, the root on top: every frame a
// rect with a <title> tooltip (function, file:line, seconds, share of
// the cell's goroutine time) and its name where it fits; frames under
// a pixel wide (or past flameMaxFrames) are left to their caller.
func (f *flame) svg() string {
	const w = flameWidth
	if f.root.total == 0 {
		return fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img"><title>%s</title>`+
			`<rect width="100%%" height="100%%" fill="#fcfcfa"/><text x="8" y="22" font-family="sans-serif" font-size="13" fill="#222">%s</text></svg>`,
			w, flameHead, w, flameHead, plot.Escape(f.root.name), plot.Escape(f.root.name+": no samples of the cell's goroutines"))
	}
	minTotal := f.minDrawn(w)
	type placed struct {
		n     *flameNode
		x, dx float64
		depth int
	}
	var frames []placed
	depth := 0
	var place func(n *flameNode, x float64, d int)
	place = func(n *flameNode, x float64, d int) {
		dx := float64(n.total) * w / float64(f.root.total)
		frames = append(frames, placed{n, x, dx, d})
		depth = max(depth, d)
		for _, c := range n.children {
			if c.total >= minTotal {
				place(c, x, d+1)
			}
			x += float64(c.total) * w / float64(f.root.total)
		}
	}
	place(f.root, 0, 0)
	h := flameHead + (depth+1)*flameRow + 6
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" style="max-width:100%%;height:auto">`, w, h, w, h, plot.Escape("Wall-clock flame graph of "+f.root.name))
	fmt.Fprintf(&b, `<title>Wall-clock flame graph of %s</title>`, plot.Escape(f.root.name))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fcfcfa" stroke="#c8c8c8"/>`)
	fmt.Fprintf(&b, `<text x="8" y="16" font-family="sans-serif" font-size="13" font-weight="600" fill="#222">%s</text>`,
		plot.Escape(fmt.Sprintf("Wall-clock profile of %s (fgprof)", f.root.name)))
	fmt.Fprintf(&b, `<text x="8" y="31" font-family="sans-serif" font-size="11" fill="#444">%s</text>`,
		plot.Escape(fmt.Sprintf("%.3f s wall, %d samples; the cell's goroutines %s, %.0f%% of it waiting (blue); interpreter grey, engine orange, kernel yellow, Go red. Hover a frame for its time.",
			f.wall.Seconds(), f.samples, seconds(f.root.total), percent(f.offCPU, f.root.total))))
	b.WriteString(`<g font-family="ui-monospace,Menlo,Consolas,monospace" font-size="11">`)
	for _, p := range frames {
		y := flameHead + p.depth*flameRow
		where := p.n.where()
		if where != "" {
			where = "\n" + where
		}
		fmt.Fprintf(&b, `<g><title>%s%s&#10;%s, %.1f%% (self %s)</title><rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="#fcfcfa" stroke-width="0.5"/>`,
			plot.Escape(p.n.name), plot.Escape(where), seconds(p.n.total), percent(p.n.total, f.root.total), seconds(p.n.self),
			p.x, y, p.dx, flameRow-1, p.n.color())
		if chars := int((p.dx - 6) / flameCharWidth); chars >= 3 {
			label := shortName(p.n.name)
			if r := []rune(label); len(r) > chars {
				label = string(r[:chars-1]) + "…"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#111">%s</text>`, p.x+3, y+12, plot.Escape(label))
		}
		b.WriteString("</g>")
	}
	b.WriteString("</g></svg>")
	return b.String()
}

// flameMime is the flame's tree for Linger's page, which draws it
// interactively (web/ui/src/notebook/flame.js).
const flameMime = "application/vnd.linger.flamegraph+json"

// flameJSON is a node of flameMime: n the function, v its total in
// nanoseconds, s its self time, f its file:line, k its kind, c its
// callees (those at least a 2000th of the root).
type flameJSON struct {
	N string       `json:"n"`
	V int64        `json:"v"`
	S int64        `json:"s,omitempty"`
	F string       `json:"f,omitempty"`
	K string       `json:"k"`
	C []*flameJSON `json:"c,omitempty"`
}

func (f *flame) json() map[string]any {
	minTotal := max(1, f.root.total/2000)
	var conv func(n *flameNode) *flameJSON
	conv = func(n *flameNode) *flameJSON {
		j := &flameJSON{N: n.name, V: n.total, S: n.self, F: n.where(), K: n.kind}
		for _, c := range n.children {
			if c.total >= minTotal {
				j.C = append(j.C, conv(c))
			}
		}
		return j
	}
	return map[string]any{"version": 1, "unit": "ns", "wall_ns": f.wall.Nanoseconds(), "samples": f.samples,
		"off_cpu_ns": f.offCPU, "other_ns": f.other, "root": conv(f.root)}
}

// html is the profile's text/html: the flame graph (for the frontends
// that pick HTML over SVG, as JupyterLab does, and draw an SVG image
// without its tooltips), the pprof file to download, and a table of the
// top functions.
func (f *flame) html(svg, file string, raw []byte) string {
	var b strings.Builder
	b.WriteString(`<div class="linger-prof">`)
	b.WriteString(svg)
	fmt.Fprintf(&b, `<p>%s: <a download="%s" href="data:application/octet-stream;base64,%s">%s</a> (%d KiB; <code>go tool pprof -http=: %s</code>)</p>`,
		html.EscapeString("The profile"), html.EscapeString(file), base64.StdEncoding.EncodeToString(raw), html.EscapeString(file), (len(raw)+1023)/1024, html.EscapeString(file))
	top := f.top(10)
	if len(top) > 0 {
		b.WriteString(`<table><caption>Functions with the most time (the cell's goroutines)</caption><thead><tr><th scope="col">function</th><th scope="col">self</th><th scope="col">%</th><th scope="col">total</th></tr></thead><tbody>`)
		for _, t := range top {
			fmt.Fprintf(&b, `<tr><td title="%s"><code>%s</code></td><td>%s</td><td>%.1f</td><td>%s</td></tr>`,
				html.EscapeString(t.name), html.EscapeString(t.label()), seconds(t.self), percent(t.self, f.root.total), seconds(t.total))
		}
		b.WriteString(`</tbody></table>`)
	}
	b.WriteString(`</div>`)
	return b.String()
}

// bundle is the profile's display_data: text/plain, image/svg+xml,
// text/html and flameMime.
func (f *flame) bundle(file string, raw []byte) map[string]any {
	j, _ := json.Marshal(f.json())
	svg := f.svg()
	return map[string]any{
		"text/plain":    f.summary(),
		"image/svg+xml": svg,
		"text/html":     f.html(svg, file, raw),
		flameMime:       json.RawMessage(j),
	}
}
