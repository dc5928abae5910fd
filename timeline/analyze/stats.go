package analyze

import "container/heap"

// fit is an incremental least-squares fit of y against a sample index x and
// against time t, with centered (Welford) sums: live bytes reach 1e12 and
// naive sums of squares would cancel catastrophically.
type fit struct {
	n                  float64
	mx, mt, my         float64
	sxx, sxy, stt, sty float64
	syy                float64
	x0, x1             float64
	first, last        float64
}

func (f *fit) add(x, t, y float64) {
	if f.n == 0 {
		f.x0, f.first = x, y
	}
	f.x1, f.last = x, y
	f.n++
	dx, dt, dy := x-f.mx, t-f.mt, y-f.my
	f.mx += dx / f.n
	f.mt += dt / f.n
	f.my += dy / f.n
	ry := y - f.my
	f.sxx += dx * (x - f.mx)
	f.stt += dt * (t - f.mt)
	f.sxy += dx * ry
	f.sty += dt * ry
	f.syy += dy * ry
}

// slope returns bytes per sample and per second, and R² of the fit
// against the sample index.
func (f *fit) slope() (perStep, perSecond, r2 float64) {
	if f.n < 2 || f.sxx == 0 {
		return 0, 0, 0
	}
	perStep = f.sxy / f.sxx
	if f.stt > 0 {
		perSecond = f.sty / f.stt
	}
	if f.syy > 0 {
		r2 = f.sxy * f.sxy / (f.sxx * f.syy)
	} else {
		r2 = 1 // constant: a perfect (flat) fit
	}
	return perStep, perSecond, r2
}

// growing applies rule r to f.
func (f *fit) growing(r GrowthRule) bool {
	perStep, _, r2 := f.slope()
	return int(f.n) >= r.MinSamples && perStep > 0 && r2 >= r.MinR2 &&
		perStep*(f.x1-f.x0) >= float64(r.MinBytes)
}

// point is one bucket of the tracks' series.
type point struct {
	seq, n   uint64
	time     int64
	min, max [numTracks]uint64
}

// series downsamples the tracks into at most max buckets of width events
// each, doubling the width (merging neighbours) when full.
type series struct {
	max   int
	width uint64
	pts   []point
}

func (s *series) init(max int) {
	s.max, s.width = max, 1
	s.pts = make([]point, 0, max)
}

func (s *series) add(seq uint64, t int64, v *[numTracks]uint64) {
	n := len(s.pts)
	if n == 0 || s.pts[n-1].n >= s.width {
		if n == s.max {
			s.merge()
		}
		s.pts = append(s.pts, point{seq: seq, time: t, min: *v, max: *v})
	}
	p := &s.pts[len(s.pts)-1]
	p.n++
	for i, x := range v {
		p.min[i] = min(p.min[i], x)
		p.max[i] = max(p.max[i], x)
	}
}

func (s *series) merge() {
	j := 0
	for i := 0; i < len(s.pts); i += 2 {
		p := s.pts[i]
		if i+1 < len(s.pts) {
			q := s.pts[i+1]
			p.n += q.n
			for k := range p.min {
				p.min[k] = min(p.min[k], q.min[k])
				p.max[k] = max(p.max[k], q.max[k])
			}
		}
		s.pts[j] = p
		j++
	}
	s.pts = s.pts[:j]
	s.width *= 2
}

// record is a lingering object kept in detail: the largest MaxObjects are.
type record struct {
	obj Object
	o   *obj // while the object lives
	idx int
}

// recHeap is a min-heap of records by size (then by later allocation), so
// the smallest is evicted first.
type recHeap []*record

func (h recHeap) Len() int { return len(h) }
func (h recHeap) Less(i, j int) bool {
	if h[i].obj.Size != h[j].obj.Size {
		return h[i].obj.Size < h[j].obj.Size
	}
	return h[i].obj.AllocSeq > h[j].obj.AllocSeq
}
func (h recHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *recHeap) Push(x any) {
	r := x.(*record)
	r.idx = len(*h)
	*h = append(*h, r)
}
func (h *recHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// keep records o in detail if it is among the largest lingering objects.
func (a *Analyzer) keep(o *obj) {
	r := &record{obj: a.object(o), o: o}
	if len(a.recs) < a.opts.MaxObjects {
		heap.Push(&a.recs, r)
		o.rec = r
		return
	}
	low := a.recs[0]
	if r.obj.Size <= low.obj.Size {
		return
	}
	if low.o != nil {
		low.o.rec = nil
	}
	r.idx = 0
	a.recs[0] = r
	heap.Fix(&a.recs, 0)
	o.rec = r
}
