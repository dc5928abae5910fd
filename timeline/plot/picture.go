package plot

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"linger/internal/units"
	"linger/timeline/event"
)

// Picture sizes in pixels: the default, and the bounds a size is kept in.
const (
	DefaultWidth  = 800
	DefaultHeight = 300
	MinWidth      = 320
	MinHeight     = 180
	MaxWidth      = 4000
	MaxHeight     = 2000
)

// Options say which stretch of a Series a Picture draws, how large, and
// what it marks.
type Options struct {
	// Width and Height are the picture's size in pixels (0: 800 × 300),
	// kept within MinWidth…MaxWidth and MinHeight…MaxHeight.
	Width, Height int
	// Title names the stretch: "In [3]", "the session".
	Title string
	// T0 and T1 bound the stretch in nanoseconds since the trace began;
	// T1 0 is the last event.
	T0, T1 int64
	// Cell is the scope of the cell the stretch is, whose finer history
	// the Series may still have; 0 for another stretch.
	Cell event.ScopeID
	// Lingering are the lingering objects to mark, at the instants they
	// were allocated; those allocated outside the stretch are left out.
	Lingering []Object
}

// Object is a lingering object as a Picture marks it.
type Object struct {
	Time            int64 // its allocation, nanoseconds since the trace began
	Size            uint64
	Category, Label string
}

// Picture is a stretch of a Series drawn: a list of shapes that SVG and
// PNG render alike, and the figures its summary says. It holds no
// reference to the Series.
type Picture struct {
	Width, Height int
	Title         string
	// Peak is the highest allocated in the stretch; Lingering and
	// LingeringBytes count the objects marked.
	Peak           uint64
	Lingering      int
	LingeringBytes uint64
	shapes         []shape
}

// Summary is the picture in a line, its text/plain: "memory over In [3]:
// peak 3.1 GiB allocated, 2 lingering objects (228.0 MiB)".
func (p *Picture) Summary() string {
	s := fmt.Sprintf("memory over %s: peak %s allocated, ", p.Title, units.Format(p.Peak))
	switch p.Lingering {
	case 0:
		return s + "no lingering objects"
	case 1:
		return s + "1 lingering object (" + units.Format(p.LingeringBytes) + ")"
	}
	return s + fmt.Sprintf("%d lingering objects (%s)", p.Lingering, units.Format(p.LingeringBytes))
}

type shapeKind uint8

const (
	shapeRect shapeKind = iota
	shapeArea           // a filled polygon
	shapeLine           // a stroked polyline
	shapeText
)

type pt struct{ x, y float64 }

// shape is one thing drawn. class, data and title are the SVG's: what
// tests and readers query, and a tooltip.
type shape struct {
	kind         shapeKind
	pts          []pt
	x, y, w, h   float64
	fill, stroke color.RGBA
	width        float64
	dash         []float64
	text         string
	anchor       int // text: -1 start, 0 middle, 1 end
	bold         bool
	class, data  string // data: data-category or data-track
	title        string
}

// Colours: the timeline page's (web/ui/src/timeline/palette.js), on an
// opaque white ground so that the picture reads the same in a light and
// a dark notebook theme.
var (
	categoryColour = [event.NumCategories]color.RGBA{
		rgb(0xDDDDDD), rgb(0x332288), rgb(0x88CCEE), rgb(0x44AA99), rgb(0x117733),
		rgb(0x999933), rgb(0xDDCC77), rgb(0xCC6677), rgb(0x882255), rgb(0xAA4499),
	}
	white      = rgb(0xFFFFFF)
	ink        = rgb(0x222222)
	faint      = rgb(0x666666)
	gridColour = rgb(0xE4E4E4)
	cellBand   = rgb(0xF0F0F0)
	idleBand   = rgb(0xDADADA)
	lingerRed  = rgb(0xD55E00)
	tracks     = []struct {
		key, label string
		colour     color.RGBA
		dash       []float64
	}{
		{"device_used", "device used", rgb(0xEE7733), []float64{2, 2}},
		{"reserved", "reserved", rgb(0x0077BB), []float64{6, 3}},
		{"allocated", "allocated", rgb(0x000000), nil},
	}
)

func rgb(v uint32) color.RGBA {
	return color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xFF}
}

// Layout, in pixels: the font's advance (a 12 px monospace in the SVG,
// basicfont's 7 × 13 in the PNG), the margins, and an idle break's width.
const (
	charW   = 7.2
	left    = 72
	right   = 16
	top     = 40
	tickH   = 20
	legendH = 16
	breakPx = 12
)

func textW(s string) float64 { return charW * float64(len([]rune(s))) }

// Picture draws a stretch of s; see Options. Call it under the lock
// that guards s: it copies what it draws.
func (s *Series) Picture(o Options) *Picture {
	w := min(max(cmp.Or(o.Width, DefaultWidth), MinWidth), MaxWidth)
	h := min(max(cmp.Or(o.Height, DefaultHeight), MinHeight), MaxHeight)
	t0, t1 := max(o.T0, 0), o.T1
	if t1 <= 0 {
		t1 = s.last
	}
	if o.Cell == 0 && s.lastMem >= 0 && s.firstMem < t1 {
		// The session from its first memory event, less a margin: not the
		// kernel's start-up, which waits for a client's first cell.
		t0 = max(t0, s.firstMem-(t1-s.firstMem)/50)
	}
	t1 = max(t1, t0+1)
	hist := &s.session
	for _, c := range []*history{&s.cell, &s.prev} {
		if o.Cell != 0 && c.scope == o.Cell && len(c.pts) > 0 {
			hist = c
		}
	}
	if hist.end == 0 {
		hist.settle(&s.mem)
	}
	p := &Picture{Width: w, Height: h, Title: o.Title}
	for _, ob := range o.Lingering {
		if ob.Time >= t0 && ob.Time <= t1 {
			p.Lingering++
			p.LingeringBytes += ob.Size
		}
	}
	ax := newAxis(t0, t1, s.breaks, w-left-right)
	cols := hist.columns(ax.width, t0, t1, ax.x)
	legend := p.legendItems(cols)
	rows := layoutLegend(legend, float64(w-left-right))
	plotH := float64(h) - top - tickH - float64(len(rows))*legendH - 8
	if plotH < 40 {
		plotH, rows = float64(h)-top-tickH-8, nil
	}
	g := frame{l: left, t: top, w: float64(ax.width), h: plotH}
	for _, c := range cols {
		p.Peak = max(p.Peak, c.alloc)
	}
	var ymax uint64
	for _, c := range cols {
		ymax = max(ymax, c.alloc, c.res, c.dev)
	}
	step, ytop := niceBytes(ymax)
	g.ymax = float64(ytop)

	p.add(shape{kind: shapeRect, w: float64(w), h: float64(h), fill: white, class: "background"})
	p.drawCells(g, ax, s.cells, t0, t1)
	p.drawBreaks(g, ax)
	for v := uint64(0); v <= ytop; v += step {
		y := g.y(float64(v))
		if v > 0 {
			p.add(shape{kind: shapeLine, pts: []pt{{g.l, y}, {g.l + g.w, y}}, stroke: gridColour, width: 1, class: "grid"})
		}
		p.add(shape{kind: shapeText, x: g.l - 6, y: y + 4, text: byteTick(v), anchor: 1, fill: faint, class: "y-tick"})
	}
	p.drawStack(g, cols)
	p.drawTracks(g, cols)
	p.drawLingering(g, ax, o.Lingering, t0, t1)
	p.drawTimeAxis(g, ax)
	p.add(shape{kind: shapeLine, pts: []pt{{g.l, g.t + g.h}, {g.l + g.w, g.t + g.h}}, stroke: faint, width: 1, class: "axis"})
	p.add(shape{kind: shapeLine, pts: []pt{{g.l, g.t}, {g.l, g.t + g.h}}, stroke: faint, width: 1, class: "axis"})
	title := "Memory over " + o.Title
	p.add(shape{kind: shapeText, x: 10, y: 18, text: title, anchor: -1, fill: ink, bold: true, class: "title"})
	peak := "peak " + units.Format(p.Peak) + " allocated"
	if p.Lingering > 0 {
		peak += fmt.Sprintf(", %d lingering (%s)", p.Lingering, units.Format(p.LingeringBytes))
	}
	if 10+textW(title)+24+textW(peak) <= float64(w)-10 {
		p.add(shape{kind: shapeText, x: float64(w) - 10, y: 18, text: peak, anchor: 1, fill: ink, class: "peak"})
	}
	p.drawLegend(g, rows)
	return p
}

func (p *Picture) add(sh shape) { p.shapes = append(p.shapes, sh) }

// frame is the plot area and its byte scale.
type frame struct{ l, t, w, h, ymax float64 }

func (g frame) y(v float64) float64 { return round1(g.t + g.h - v/g.ymax*g.h) }

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// axis maps time to a column: linear, but for the longest idle breaks in
// the stretch, each breakPx wide whatever its length, as the timeline
// page collapses idle time, so that the cells fill the picture.
type axis struct {
	t0, t1 int64
	width  int
	breaks []Break
	k      float64 // columns per nanosecond outside breaks
}

func newAxis(t0, t1 int64, all []Break, width int) *axis {
	a := &axis{t0: t0, t1: t1, width: width}
	var in []Break
	for _, b := range all {
		b.T0, b.T1 = max(b.T0, t0), min(b.T1, t1)
		if b.T1-b.T0 >= minBreak {
			in = append(in, b)
		}
	}
	// The longest, while they leave half the width to the time between.
	slices.SortFunc(in, func(a, b Break) int { return cmp.Compare(b.T1-b.T0, a.T1-a.T0) })
	in = in[:min(len(in), width/2/breakPx)]
	var idle int64
	for _, b := range in {
		idle += b.T1 - b.T0
	}
	if t1-t0-idle <= 0 {
		in, idle = nil, 0 // all idle: draw it linear
	}
	slices.SortFunc(in, func(a, b Break) int { return cmp.Compare(a.T0, b.T0) })
	a.breaks = in
	a.k = float64(width-breakPx*len(in)) / float64(t1-t0-idle)
	return a
}

// x is t's column, fractional; columns run from 0 to width.
func (a *axis) x(t int64) float64 {
	t = min(max(t, a.t0), a.t1)
	x, from := 0.0, a.t0
	for _, b := range a.breaks {
		if t <= b.T0 {
			break
		}
		x += a.k * float64(b.T0-from)
		if t < b.T1 {
			return x + breakPx*float64(t-b.T0)/float64(b.T1-b.T0)
		}
		x += breakPx
		from = b.T1
	}
	return x + a.k*float64(t-from)
}

// niceBytes returns a tick step of a power of two bytes giving at most
// five ticks above 0, and the top of the scale, a multiple of it.
func niceBytes(v uint64) (step, topV uint64) {
	if v == 0 {
		return 1 << 20, 1 << 20
	}
	step = 1
	for (v+step-1)/step > 5 {
		step *= 2
	}
	return step, (v + step - 1) / step * step
}

// byteTick prints a tick's bytes in binary units, without trailing
// zeros: "0", "512 MiB", "1.5 GiB".
func byteTick(v uint64) string {
	if v == 0 {
		return "0"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	f := float64(v)
	for i < len(units)-1 && f >= 1024 {
		f /= 1024
		i++
	}
	return strconv.FormatFloat(f, 'f', -1, 64) + " " + units[i]
}

// niceTime returns a tick step of 1, 2 or 5 times a power of ten
// nanoseconds giving at most about n ticks over span.
func niceTime(span float64, n int) int64 {
	raw := span / float64(max(n, 1))
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if float64(m*p) >= raw || p > math.MaxInt64/100 {
				return m * p
			}
		}
	}
}

// cellName is a cell span's name as the page prompts it: "In [3]", "In
// [3]-[9]" for merged runs, "cell" for a silent run.
func cellName(c Cell) string {
	switch {
	case c.Count == 0:
		return "cell"
	case c.Runs > 1 && c.LastCount != c.Count:
		return fmt.Sprintf("In [%d]-[%d]", c.Count, c.LastCount)
	}
	return fmt.Sprintf("In [%d]", c.Count)
}

func (p *Picture) drawCells(g frame, ax *axis, cells []Cell, t0, t1 int64) {
	n := 0
	for _, c := range cells {
		end := c.T1
		if end == 0 {
			end = t1
		}
		if end < t0 || c.T0 > t1 {
			continue
		}
		x0, x1 := g.l+ax.x(c.T0), g.l+ax.x(end)
		n++
		if n%2 == 1 {
			p.add(shape{kind: shapeRect, x: x0, y: g.t, w: max(x1-x0, 1), h: g.h, fill: cellBand, class: "cell", title: cellName(c)})
		}
		if name := cellName(c); textW(name)+6 <= x1-x0 {
			p.add(shape{kind: shapeText, x: x0 + 3, y: g.t + 12, text: name, anchor: -1, fill: faint, class: "cell-label"})
		}
	}
}

func (p *Picture) drawBreaks(g frame, ax *axis) {
	for _, b := range ax.breaks {
		x0 := g.l + ax.x(b.T0)
		p.add(shape{kind: shapeRect, x: x0, y: g.t, w: breakPx, h: g.h, fill: idleBand, class: "idle",
			title: "idle for " + units.FormatDuration(b.T1-b.T0)})
	}
}

// stacked lists the categories the columns hold, bottom first:
// weights, kv_cache, ... and none last.
func stacked(cols []column) []event.Category {
	var out []event.Category
	for c := event.Category(1); c <= event.NumCategories; c++ {
		cat := c % event.NumCategories
		for i := range cols {
			if cols[i].cat[cat] > 0 {
				out = append(out, cat)
				break
			}
		}
	}
	return out
}

// drawStack fills each category's area, the columns stacked at their
// allocated peak: each area is drawn from the baseline to the top of its
// category, top category first, so that one path per category suffices.
func (p *Picture) drawStack(g frame, cols []column) {
	cats := stacked(cols)
	sum := make([]uint64, len(cols))
	tops := make([][]uint64, len(cats))
	for k, cat := range cats {
		tops[k] = make([]uint64, len(cols))
		for j := range cols {
			sum[j] += cols[j].cat[cat]
			tops[k][j] = sum[j]
		}
	}
	base := g.t + g.h
	for k := len(cats) - 1; k >= 0; k-- {
		pts := []pt{{g.l, base}}
		pts = stepPoints(pts, g, tops[k])
		pts = append(pts, pt{g.l + g.w, base})
		p.add(shape{kind: shapeArea, pts: pts, fill: categoryColour[cats[k]], class: "category", data: cats[k].String()})
	}
}

// stepPoints appends the steps of vs, one value per column, leaving out
// the points a straight run does not need.
func stepPoints(pts []pt, g frame, vs []uint64) []pt {
	add := func(q pt) {
		n := len(pts)
		if n >= 2 && (pts[n-1].y == q.y && pts[n-2].y == q.y || pts[n-1].x == q.x && pts[n-2].x == q.x) {
			pts[n-1] = q
			return
		}
		if n >= 1 && pts[n-1] == q {
			return
		}
		pts = append(pts, q)
	}
	for j, v := range vs {
		y := g.y(float64(v))
		add(pt{g.l + float64(j), y})
		add(pt{g.l + float64(j+1), y})
	}
	return pts
}

func (p *Picture) drawTracks(g frame, cols []column) {
	vs := make([]uint64, len(cols))
	for _, tr := range tracks {
		for j, c := range cols {
			switch tr.key {
			case "allocated":
				vs[j] = c.alloc
			case "reserved":
				vs[j] = c.res
			default:
				vs[j] = c.dev
			}
		}
		p.add(shape{kind: shapeLine, pts: stepPoints(nil, g, vs), stroke: tr.colour, width: 1.5, dash: tr.dash, class: "track", data: tr.key})
	}
}

// markPx is the width of the stretch one lingering mark stands for.
const markPx = 8

// drawLingering marks the lingering objects allocated in the stretch, one
// mark per markPx columns however many objects they have: a triangle
// above the plot and a line down through it, with what they are as the
// tooltip.
func (p *Picture) drawLingering(g frame, ax *axis, objs []Object, t0, t1 int64) {
	type mark struct {
		n     int
		bytes uint64
		names []string
	}
	byCol := map[int]*mark{}
	var order []int
	for _, o := range objs {
		if o.Time < t0 || o.Time > t1 {
			continue
		}
		c := clampCol(ax.x(o.Time), ax.width) / markPx
		m := byCol[c]
		if m == nil {
			m = &mark{}
			byCol[c] = m
			order = append(order, c)
		}
		m.n++
		m.bytes += o.Size
		if len(m.names) < 3 {
			m.names = append(m.names, fmt.Sprintf("%s (%s, %s)", cmp.Or(o.Label, "unlabeled"), o.Category, units.Format(o.Size)))
		}
	}
	slices.Sort(order)
	for _, c := range order {
		m := byCol[c]
		x := g.l + math.Min(float64(c*markPx)+markPx/2, g.w-1) + 0.5
		title := fmt.Sprintf("%d lingering, %s: %s", m.n, units.Format(m.bytes), strings.Join(m.names, ", "))
		if m.n > len(m.names) {
			title += ", ..."
		}
		p.add(shape{kind: shapeLine, pts: []pt{{x, g.t}, {x, g.t + g.h}}, stroke: lingerRed, width: 1, dash: []float64{3, 2}, class: "lingering-line"})
		p.add(shape{kind: shapeArea, pts: []pt{{x - 5, g.t - 10}, {x + 5, g.t - 10}, {x, g.t - 1}}, fill: lingerRed, class: "lingering", title: title})
	}
}

func (p *Picture) drawTimeAxis(g frame, ax *axis) {
	span := float64(ax.t1 - ax.t0)
	for _, b := range ax.breaks {
		span -= float64(b.T1 - b.T0)
	}
	step := niceTime(span, int(g.w/110))
	lastEnd := math.Inf(-1)
	base := g.t + g.h
	emit := func(rel int64) {
		x := g.l + ax.x(ax.t0+rel)
		label := units.FormatDuration(rel)
		if rel == 0 {
			label = "0"
		}
		w := textW(label)
		if x-w/2 < lastEnd+8 || x+w/2 > g.l+g.w+right {
			return
		}
		lastEnd = x + w/2
		p.add(shape{kind: shapeLine, pts: []pt{{x, base}, {x, base + 4}}, stroke: faint, width: 1, class: "x-tick-mark"})
		p.add(shape{kind: shapeText, x: x, y: base + 15, text: label, anchor: 0, fill: faint, class: "x-tick"})
	}
	from := int64(0)
	for _, b := range append(slices.Clone(ax.breaks), Break{T0: ax.t1, T1: ax.t1}) {
		// Ticks at the step's multiples between breaks; after a break the
		// first is at its end, since the time there jumped.
		for rel := (from + step - 1) / step * step; ax.t0+rel <= b.T0; rel += step {
			emit(rel)
		}
		from = b.T1 - ax.t0
		if b.T1 < ax.t1 {
			emit(from)
		}
	}
}

// legendItem is a legend entry: a category's swatch, a track's line or
// the lingering mark.
type legendItem struct {
	label  string
	cat    event.Category
	track  int // index into tracks, -1 none
	linger bool
}

func (p *Picture) legendItems(cols []column) []legendItem {
	var out []legendItem
	for _, c := range stacked(cols) {
		out = append(out, legendItem{label: c.String(), cat: c, track: -1})
	}
	for i := len(tracks) - 1; i >= 0; i-- {
		out = append(out, legendItem{label: tracks[i].label, track: i})
	}
	if p.Lingering > 0 {
		out = append(out, legendItem{label: "lingering", track: -1, linger: true})
	}
	return out
}

// legendW is an entry's width: its swatch, a gap and its label.
func legendW(it legendItem) float64 {
	sw := 12.0
	if it.track >= 0 {
		sw = 20
	}
	return sw + 5 + textW(it.label) + 16
}

func layoutLegend(items []legendItem, width float64) [][]legendItem {
	var rows [][]legendItem
	x := math.Inf(1)
	for _, it := range items {
		if x+legendW(it) > width {
			rows = append(rows, nil)
			x = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], it)
		x += legendW(it)
	}
	return rows
}

func (p *Picture) drawLegend(g frame, rows [][]legendItem) {
	y := g.t + g.h + tickH + 4
	for _, row := range rows {
		x := g.l
		for _, it := range row {
			cy := y + legendH/2
			switch {
			case it.track >= 0:
				tr := tracks[it.track]
				p.add(shape{kind: shapeLine, pts: []pt{{x, cy}, {x + 20, cy}}, stroke: tr.colour, width: 2, dash: tr.dash, class: "legend-track", data: tr.key})
				x += 20
			case it.linger:
				p.add(shape{kind: shapeArea, pts: []pt{{x + 1, cy - 4}, {x + 11, cy - 4}, {x + 6, cy + 5}}, fill: lingerRed, class: "legend-lingering"})
				x += 12
			default:
				p.add(shape{kind: shapeRect, x: x, y: cy - 5, w: 10, h: 10, fill: categoryColour[it.cat], class: "legend-category", data: it.cat.String()})
				x += 12
			}
			p.add(shape{kind: shapeText, x: x + 5, y: cy + 4, text: it.label, anchor: -1, fill: ink, class: "legend-label"})
			x += 5 + textW(it.label) + 16
		}
		y += legendH
	}
}
