package analyze

import (
	"linger/timeline/event"
	"linger/timeline/memstate"
)

// Outside is the memory a trace took from the device outside the caching
// allocator: its segments of pool event.PoolOutside (a library's own
// cudaMalloc, NCCL's buffers, mem.take_outside), memstate.State.Outside.
// Peak is the most held at once, first reached at PeakSeq; End is what
// was held when the session's teardown began (AtTeardown), else at the
// last event: what the session itself never gave back.
type Outside struct {
	Peak       uint64 `json:"peak"`
	PeakSeq    uint64 `json:"peak_seq"`
	PeakTimeNS int64  `json:"peak_time_ns"`
	End        uint64 `json:"end"`
	AtTeardown bool   `json:"at_teardown"`
}

// outsideTrack follows Outside as events come, at a constant cost per
// event.
type outsideTrack struct{ Outside }

// note records memory as event e left it; teardown says whether the
// session's teardown is open.
func (o *outsideTrack) note(m *memstate.State, e *event.Event, teardown bool) {
	if m.Outside > o.Peak {
		o.Peak, o.PeakSeq, o.PeakTimeNS = m.Outside, e.Seq, e.Time
	}
	if teardown && !o.AtTeardown {
		o.End, o.AtTeardown = m.Outside, true
	}
}

// report is Outside now, given memory now.
func (o *outsideTrack) report(m *memstate.State) Outside {
	r := o.Outside
	if !r.AtTeardown {
		r.End = m.Outside
	}
	return r
}
