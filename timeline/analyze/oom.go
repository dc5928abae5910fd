package analyze

import (
	"cmp"
	"slices"

	"linger/timeline/event"
	"linger/timeline/memstate"
)

// maxOOMs bounds the out-of-memory events a report details;
// Anomalies.OOMs counts them all.
const maxOOMs = 16

// OOM is an allocation that failed for lack of device memory: what was
// asked for, where, and what was alive when it failed.
type OOM struct {
	Seq       uint64       `json:"seq"`
	TimeNS    int64        `json:"time_ns"`
	Size      uint64       `json:"size"` // the request as the allocator rounded it
	Requested uint64       `json:"requested"`
	Category  string       `json:"category"`
	Label     string       `json:"label,omitempty"`
	Site      string       `json:"site,omitempty"` // as Stat.Site
	SiteID    event.SiteID `json:"site_id,omitempty"`
	Stack     []StackFrame `json:"stack,omitempty"`
	// DeviceFree is what the allocator could still have taken: the
	// device's free bytes under its memory limit (the event's Extra).
	DeviceFree uint64 `json:"device_free"`
	// The tracks when it failed.
	Allocated  uint64 `json:"allocated"`
	Reserved   uint64 `json:"reserved"`
	DeviceUsed uint64 `json:"device_used"`
	// Live is what was alive by category, largest first: the allocator's
	// blocks (the figures of its oom.live.* counters), what the objects
	// asked for, and how many.
	Live []Share `json:"live"`
}

// oomRec is an oom event and what was alive when it came.
type oomRec struct {
	e      event.Event
	tracks [numTracks]uint64
	live   [event.NumCategories]struct{ bytes, req, n uint64 }
}

// noteOOM keeps the first maxOOMs oom events with what was alive then.
func (a *Analyzer) noteOOM(e *event.Event) {
	if len(a.ooms) >= maxOOMs {
		return
	}
	r := oomRec{e: *e, tracks: a.mem.Tracks}
	for i := range a.cats[:catOutside] { // the allocator's categories
		g := &a.cats[i]
		r.live[i].bytes, r.live[i].req, r.live[i].n = g.live, g.liveReq, g.liveN
	}
	a.ooms = append(a.ooms, r)
}

func (a *Analyzer) reportOOMs(rep *Report, r *resolver) {
	rep.OOMs = make([]OOM, 0, len(a.ooms))
	for _, o := range a.ooms {
		x := OOM{Seq: o.e.Seq, TimeNS: o.e.Time, Size: o.e.Size, Requested: o.e.Requested, Category: o.e.Category.String(),
			Label: r.str(o.e.Label), Site: r.site(o.e.Site), SiteID: o.e.Site, Stack: r.stack(o.e.Site), DeviceFree: o.e.OOMView().Free(),
			Allocated: o.tracks[memstate.Allocated], Reserved: o.tracks[memstate.Reserved], DeviceUsed: o.tracks[memstate.DeviceUsed],
			Live: []Share{}}
		if o.e.Site == 0 {
			x.Site = ""
		}
		for c, l := range o.live {
			if l.n > 0 {
				x.Live = append(x.Live, Share{Category: event.Category(c).String(), Bytes: l.bytes, Requested: l.req, Count: l.n})
			}
		}
		slices.SortStableFunc(x.Live, func(p, q Share) int { return cmp.Compare(q.Bytes, p.Bytes) })
		rep.OOMs = append(rep.OOMs, x)
	}
}
