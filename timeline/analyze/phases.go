package analyze

import (
	"slices"

	"linger/timeline/event"
	"linger/timeline/memstate"
)

// A notebook runs its phases one cell after another, each perhaps
// growing another track (scenario 8: a leak, then cache retention, then
// memory outside the allocator), and undoing it before the next (empty
// the cache, release the buffers): the whole trace's one verdict sees
// none of them. So the tracks are also fitted over each cell run, at the
// ends of the steps (else the requests) inside it, and each run whose
// tracks grow is a Phase of the report.

// phaseKinds are the scope kinds a cell run's tracks are sampled at,
// finest first.
var phaseKinds = [...]event.ScopeKind{event.ScopeStep, event.ScopeRequest}

// cellTracks are the tracks' fits over the cell run going on.
type cellTracks struct {
	fits  [len(phaseKinds)][numTracks]fit
	first [len(phaseKinds)]int64 // time of the first sample
}

// Phase is a cell run over which a track grows, by the growth rule, as
// Tracks.Verdict judges the whole trace.
type Phase struct {
	Cell    string `json:"cell"` // the cell's id (Report.Cells names it)
	BeginNS int64  `json:"begin_ns"`
	EndNS   int64  `json:"end_ns"` // the cell run's end
	Unit    string `json:"unit"`   // the scope kind of the samples
	Samples int    `json:"samples"`
	// Verdict is as Tracks.Verdict's, never "flat".
	Verdict          string      `json:"verdict"`
	AllocatedPerStep float64     `json:"allocated_per_step"` // per sample (Unit)
	ReservedPerStep  float64     `json:"reserved_per_step"`
	DevicePerStep    float64     `json:"device_used_per_step"`
	GoHeapPerStep    float64     `json:"go_heap_per_step,omitempty"`
	Start            TrackValues `json:"start"` // at the first sample
	Last             TrackValues `json:"last"`  // at the last
	// GoHeapGrows says that the Go heap grows over the run, as
	// Tracks.GoHeapGrows over the trace, and that host buffers by site
	// hold at least half of it (hostSites.holdCell); HostSites are then
	// the places whose host buffers hold the growth when the run ends.
	GoHeapGrows bool       `json:"go_heap_grows,omitempty"`
	HostSites   []HostSite `json:"host_sites,omitempty"`

	cellID event.StringID
}

// maxPhases bounds the phases a report lists.
const maxPhases = 64

// cellTracks samples the tracks at the end of a step or request, and
// judges them at the end of a cell run.
func (a *Analyzer) cellTracks(s *scope, e *event.Event) {
	c := &a.wide.cell
	for i, k := range phaseKinds {
		if s.kind != k {
			continue
		}
		f := &c.fits[i]
		if f[0].n == 0 {
			c.first[i] = e.Time
		}
		x := f[0].n
		for t := range f {
			f[t].add(x, float64(e.Time)/1e9, float64(a.mem.Tracks[t]))
		}
	}
	if s.kind != event.ScopeCell {
		return
	}
	if p, ok := a.phase(c); ok && len(a.wide.phases) < maxPhases {
		p.cellID, p.EndNS = s.label, e.Time
		if p.GoHeapGrows {
			p.HostSites = a.host.cell(a.opts.Growth.MinBytes)
		}
		a.wide.phases = append(a.wide.phases, p)
	}
	a.host.cellEnd()
	*c = cellTracks{}
}

// phase judges a cell run's tracks at the finest kind with enough
// samples.
func (a *Analyzer) phase(c *cellTracks) (Phase, bool) {
	rule := a.opts.Growth
	for i, k := range phaseKinds {
		f := &c.fits[i]
		if int(f[0].n) < rule.MinSamples {
			continue
		}
		var v string
		goHeap := a.mem.Counted(memstate.GoHeap) && goHeapGrows(&f[memstate.GoHeap], rule) && a.host.holdCell(&f[memstate.GoHeap])
		switch {
		case f[memstate.Allocated].growing(rule):
			v = VerdictAllocated
		case f[memstate.Reserved].growing(rule):
			v = VerdictReserved
		case f[memstate.DeviceUsed].growing(rule):
			v = VerdictDevice
		case goHeap:
			v = VerdictGoHeap // as hostVerdict
		default:
			return Phase{}, false
		}
		var first, last [numTracks]uint64
		for t := range f {
			first[t], last[t] = uint64(f[t].first), uint64(f[t].last)
		}
		p := Phase{BeginNS: c.first[i], Unit: k.String(), Samples: int(f[0].n), Verdict: v, Start: values(first), Last: values(last)}
		p.AllocatedPerStep, _, _ = f[memstate.Allocated].slope()
		p.ReservedPerStep, _, _ = f[memstate.Reserved].slope()
		p.DevicePerStep, _, _ = f[memstate.DeviceUsed].slope()
		p.GoHeapPerStep, _, _ = f[memstate.GoHeap].slope()
		p.GoHeapGrows = goHeap
		return p, true
	}
	return Phase{}, false
}

func (a *Analyzer) reportPhases(rep *Report, r *resolver) {
	rep.Tracks.Phases = make([]Phase, len(a.wide.phases))
	for i, p := range a.wide.phases {
		p.Cell = r.str(p.cellID)
		p.HostSites = namedHostSites(slices.Clone(p.HostSites), r)
		rep.Tracks.Phases[i] = p
	}
}
