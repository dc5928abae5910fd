package analyze

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"linger/internal/units"
	"linger/timeline/event"
)

// textRows bounds each list in the text output.
const textRows = 5

// WriteText writes the report for people: most important first
// (lingering, growth, duplicates, peak, tracks), a few lines each.
func (rep *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format+"\n", args...) }
	if rep.Truncated != "" {
		p("TRUNCATED: %s; analyzed %d events up to seq %d", rep.Truncated, rep.Events, rep.LastSeq)
	}
	p("trace: %d events (seq %d–%d), %s", rep.Events, rep.FirstSeq, rep.LastSeq, fmtDuration(rep.DurationNS))
	if e := rep.Ended; e != nil {
		switch {
		case e.Writing:
			p("still being written (no end frame yet): analyzed up to event %d", rep.LastSeq)
		case e.CutOff:
			p("ended: cut off (no end frame)")
		case e.Clean:
			p("ended: cleanly")
		default:
			p("ended: %s", e.Reason)
		}
	}
	unit := rep.GrowthUnit
	if unit == "" {
		unit = "step"
	}
	n := sitesOf(rep)
	growth := rep.Growth
	if rep.Service != nil {
		// A watched service's steps are its samples.
		unit = "sample"
		growth = slices.Clone(growth)
		for i := range growth {
			growth[i].Unit = unit
		}
		writeService(p, n, rep.Service)
	}
	writeOOMs(p, n, rep.OOMs, rep.Anomalies.OOMs)
	writeLingering(p, n, &rep.Lingering)
	if rep.Needs != "" {
		p("verdicts by scope: %s", rep.Needs)
	}
	writeGrowth(p, n, growth, unit)
	writeDuplicates(p, n, rep.Duplicates, unit)
	writePeak(p, n, &rep.Peak)
	if rep.Service != nil {
		writeServiceTracks(p, &rep.Tracks)
	} else {
		writeTracks(p, n, &rep.Tracks, unit)
	}
	writeOutside(p, &rep.Outside)
	if a := rep.Anomalies; a.UnknownFrees+a.DoubleAllocs+a.UnknownScopes+a.OutOfOrder+a.Gaps > 0 {
		p("anomalies: %d unknown frees, %d double allocs, %d unknown scopes, %d out of order, %d gaps",
			a.UnknownFrees, a.DoubleAllocs, a.UnknownScopes, a.OutOfOrder, a.Gaps)
	}
	// The bufio.Writer keeps the first write error, and Flush returns it.
	return bw.Flush()
}

// reportSites names a report's sites and cells for its text (CellNames).
type reportSites struct {
	rep   *Report
	names *CellNames
}

func sitesOf(rep *Report) reportSites { return reportSites{rep, rep.CellNames()} }

// short is site id by its first places (CellNames.Short).
func (n reportSites) short(id event.SiteID) string { return n.names.Short(n.rep.Site(id)) }

// writeOOMs writes the allocations that failed, n in all, each with what
// it asked for, where, what was free under the device's limit and what
// was alive; nothing for a trace without one.
func writeOOMs(p printer, n reportSites, ooms []OOM, count uint64) {
	if count == 0 {
		return
	}
	p("out of memory: %d allocation(s) failed", count)
	for _, o := range ooms[:min(len(ooms), textRows)] {
		label := ""
		if o.Label != "" {
			label = fmt.Sprintf(" %q", o.Label)
		}
		p("  %-10s%s %s at seq %d (%s); %s free under the limit; allocated %s, reserved %s, device used %s  at %s",
			o.Category, label, fmtBlocks(o.Requested, o.Size), o.Seq, fmtDuration(o.TimeNS), fmtBytes(o.DeviceFree),
			fmtBytes(o.Allocated), fmtBytes(o.Reserved), fmtBytes(o.DeviceUsed), n.short(o.SiteID))
		var live []string
		for _, s := range o.Live[:min(len(o.Live), textRows)] {
			live = append(live, fmt.Sprintf("%s %s in %d", s.Category, fmtBlocks(s.Requested, s.Bytes), s.Count))
		}
		if len(live) > 0 {
			p("    alive: %s", strings.Join(live, ", "))
		}
	}
}

// printer writes one line of the text report.
type printer func(format string, args ...any)

func writeLingering(p printer, n reportSites, l *Lingering) {
	if l.Count == 0 {
		p("lingering: none")
		return
	}
	late := "none freed late"
	if l.LateFrees > 0 {
		late = fmt.Sprintf("freed late %d, %s, mean delay %s, max %s / %d events / %d steps", l.LateFrees, fmtBlocks(l.LateFreeRequested, l.LateFreeBytes),
			fmtDuration(l.MeanDelayNS), fmtDuration(l.MaxDelayNS), l.MaxDelayEvents, l.MaxDelaySteps)
	}
	p("lingering: %d objects, %s; leaked %d, %s; %s", l.Count, fmtBlocks(l.Requested, l.Bytes), l.Leaked, fmtBlocks(l.LeakedRequested, l.LeakedBytes), late)
	for _, t := range l.BySite[:min(len(l.BySite), textRows)] {
		p("  %-10s %10s in %d objects, leaked %s  at %s", t.Category, fmtBlocks(t.Requested, t.Bytes), t.Count,
			fmtBlocks(t.LeakedRequested, t.LeakedBytes), n.short(t.SiteID))
	}
	for _, o := range l.Objects[:min(len(l.Objects), textRows)] {
		state := "leaked"
		if !o.Leaked {
			state = fmt.Sprintf("freed %s late", fmtDuration(o.DelayNS))
		}
		p("  - %s %q %s, expected to die with %s %q (ended seq %d); %s; at %s",
			o.Category, o.Label, fmtBlocks(o.Requested, o.Size), o.ScopeKind, o.ScopeLabel, o.LingerSeq, state, n.short(o.SiteID))
	}
}

// writeService writes what a watched service's trace says of it: its
// samples, failures and restarts, the heap by site at the compared
// samples, the goroutines against their baseline, and each threshold.
func writeService(p printer, n reportSites, s *Service) {
	line := fmt.Sprintf("service %s: %d samples", s.Target, s.Samples)
	if s.Failed > 0 {
		line += fmt.Sprintf("; %d failed", s.Failed)
		if len(s.Failures) > 0 {
			f := s.Failures[len(s.Failures)-1]
			line += fmt.Sprintf(" (the last at %s: %s)", fmtClock(f.TimeNS), f.Text)
		}
	}
	if s.RestartCount > 0 {
		line += fmt.Sprintf("; restarted %d times (the first at %s: %s)", s.RestartCount, fmtClock(s.Restarts[0].TimeNS), s.Restarts[0].Text)
	}
	p("%s", line)
	c := &s.Comparison
	rows := c.Rows[:min(len(c.Rows), 2*textRows)]
	where := make([]Site, len(rows))
	for i, r := range rows {
		where[i] = n.rep.Site(r.SiteID)
	}
	names := n.names.Distinct(where) // a service's sites often share their own innermost frame (a handler)
	if len(c.Points) > 0 {
		var at []string
		for _, pt := range c.Points {
			at = append(at, fmt.Sprintf("sample %d (%s)", pt.Sample, fmtClock(pt.TimeNS)))
		}
		p("  heap in use by site at %s:", strings.Join(at, ", "))
		for i, r := range rows {
			var b []string
			for _, v := range r.Bytes {
				b = append(b, fmt.Sprintf("%10s", fmtBytes(v)))
			}
			grew := ""
			if r.Grew {
				grew = " grew"
			}
			p("    %s  %10s%-5s  %s", strings.Join(b, " "), fmtSigned(float64(r.Change)), grew, names[i])
		}
		if more := len(c.Rows) - 2*textRows + c.Omitted; more > 0 {
			p("    … and %d more sites", more)
		}
	}
	if g := s.Goroutines; g != nil {
		verdict := "within"
		if !g.Within {
			verdict = "NOT within"
		}
		p("  goroutines: %d at the last sample (%s), baseline %d (%+.1f %%): %s ±%d (%.1f %%)", g.Last, fmtClock(g.LastTimeNS), g.Baseline, 100*g.Change,
			verdict, g.Allowed, float64(g.TolerancePPM)/1e4)
	}
	for _, t := range s.Thresholds {
		state := "never over"
		if t.Breached {
			state = fmt.Sprintf("BREACHED at %d of %d samples, first at %s", t.Over, t.Samples, fmtClock(t.FirstOverNS))
		}
		now := ""
		if t.OverNow {
			now = " (over now)"
		}
		if t.Samples == 0 {
			p("  threshold %s over %s: no sample", t.Counter, fmtCounter(t.Counter, t.Limit))
			continue
		}
		p("  threshold %s over %s: %s; max %s at %s, last %s%s", t.Counter, fmtCounter(t.Counter, t.Limit), state,
			fmtCounter(t.Counter, t.Max), fmtClock(t.MaxTimeNS), fmtCounter(t.Counter, t.Last), now)
	}
}

// fmtCounter prints a service counter's value in its unit.
func fmtCounter(name string, v uint64) string {
	switch {
	case name == event.CounterGoHeap:
		return fmtBytes(v)
	case name == event.CounterGCPauseP99:
		return fmtDuration(int64(v))
	case strings.HasPrefix(name, event.CounterAllocBytesRate):
		return fmtBytes(v) + "/s"
	case strings.HasPrefix(name, event.CounterAllocObjectsRate):
		return fmt.Sprintf("%d/s", v)
	}
	return fmt.Sprint(v)
}

// fmtClock is a time in a watch: "12.3 s", "10 min 2 s".
func fmtClock(ns int64) string {
	if ns < 60e9 {
		return fmt.Sprintf("%.1f s", float64(ns)/1e9)
	}
	s := ns / 1e9
	if s < 3600 {
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	}
	return fmt.Sprintf("%d h %d min", s/3600, s%3600/60)
}

// writeGrowth writes the growing totals; unit is the scope kind they were
// sampled at.
func writeGrowth(p printer, n reportSites, growth []Growth, unit string) {
	if len(growth) == 0 {
		p("growth: none")
		return
	}
	p("growth:")
	for _, g := range growth[:min(len(growth), textRows)] {
		where := "(all sites)"
		if g.Site != "" {
			where = n.short(g.SiteID)
		}
		unit := cmp.Or(g.Unit, unit)
		perStep := fmtRate(g.RequestedPerStep, g.BytesPerStep, unit)
		// The same growth per request and per cell, which a notebook
		// counts, where the samples are finer (the engine's steps).
		for _, r := range g.Per {
			perStep += fmt.Sprintf(", %s over %d %ss", fmtRate(r.RequestedPer, r.BytesPer, r.Unit), r.Samples, r.Unit)
		}
		p("  %-10s %s, %s/s, R² %.2f over %d %ss, %s  %s", g.Category, perStep,
			fmtSigned(g.RequestedPerSecond), g.R2, g.Samples, unit, fmtSpan(g.FirstRequested, g.LastRequested, g.First, g.Last, " → "), where)
	}
}

// fmtRate is a growth rate per unit, as requested, then the allocator's
// blocks when they read differently: "+1.0 MiB/step (+1.5 MiB allocated)".
func fmtRate(requested, size float64, unit string) string {
	r := fmtSigned(requested) + "/" + unit
	if a := fmtSigned(size) + "/" + unit; a != r {
		r += " (" + fmtSigned(size) + " allocated)"
	}
	return r
}

func writeDuplicates(p printer, n reportSites, dups []Duplicate, unit string) {
	if len(dups) == 0 {
		p("duplicates: none")
		return
	}
	p("duplicates:")
	dups = dups[:min(len(dups), textRows)]
	where := make([]Site, len(dups))
	for i, d := range dups {
		where[i] = n.rep.Site(d.SiteID)
	}
	sites := n.names.Distinct(where)
	for i, d := range dups {
		live := ""
		if d.MaxLive > 1 {
			live = fmt.Sprintf(", up to %d alive at once (%s)", d.MaxLive, fmtBlocks(d.MaxLiveRequested, d.MaxLiveBytes))
		}
		p("  %-10s %q %d copies in %d %ss, %s each, %s in all%s; one buffer would save %s  at %s",
			d.Category, d.Label, d.Count, d.Steps, unit, fmtSpan(d.MinRequested, d.MaxRequested, d.MinSize, d.MaxSize, "–"),
			fmtBlocks(d.TotalRequested, d.TotalBytes), live, fmtBlocks(d.SavedRequested, d.SavedBytes), sites[i])
	}
}

func writePeak(p printer, n reportSites, pk *Peak) {
	p("peak: %s in %d objects at seq %d (%s)", fmtBlocks(pk.Requested, pk.Bytes), pk.Objects, pk.Seq, fmtDuration(pk.TimeNS))
	for _, s := range pk.ByCategory[:min(len(pk.ByCategory), textRows)] {
		p("  %-10s %10s in %d", s.Category, fmtBlocks(s.Requested, s.Bytes), s.Count)
	}
	for _, s := range pk.BySite[:min(len(pk.BySite), textRows)] {
		p("  %-10s %10s in %d  at %s", s.Category, fmtBlocks(s.Requested, s.Bytes), s.Count, n.short(s.SiteID))
	}
}

// writeTracks writes the verdict on the memory tracks and the figures it
// rests on; unit is the growth unit, for the Go heap's rate.
//
// The figures are those of the first and the last growth sample, which
// the verdict rests on; the trace's end, when it reads differently (a
// session's teardown frees what the session held), is said apart: a
// track that grew and was then torn down did not grow to 0.
func writeTracks(p printer, n reportSites, t *Tracks, unit string) {
	three := func(v TrackValues) string {
		return fmt.Sprintf("allocated %s, reserved %s, device used %s", fmtBytes(v.Allocated), fmtBytes(v.Reserved), fmtBytes(v.DeviceUsed))
	}
	if t.Samples == 0 {
		p("tracks: %s; at the end: %s", verdictText(t.Verdict), three(t.End))
		return
	}
	p("tracks: %s; first → last %s of %d: allocated %s → %s, reserved %s → %s, device used %s → %s", verdictText(t.Verdict), unit, t.Samples,
		fmtBytes(t.Start.Allocated), fmtBytes(t.Last.Allocated), fmtBytes(t.Start.Reserved), fmtBytes(t.Last.Reserved),
		fmtBytes(t.Start.DeviceUsed), fmtBytes(t.Last.DeviceUsed))
	if end := three(t.End); end != three(t.Last) {
		p("  at the trace's end, after the last %s: %s", unit, end)
	}
	p("  cached gap (reserved − allocated) %s → %s; outside gap (device − reserved) %s → %s",
		fmtSigned(float64(t.Start.CachedGap)), fmtSigned(float64(t.Last.CachedGap)),
		fmtSigned(float64(t.Start.OutsideGap)), fmtSigned(float64(t.Last.OutsideGap)))
	if t.HasGoHeap {
		state := "flat"
		if t.GoHeapGrows {
			state = "grows " + fmtSigned(t.GoHeapPerStep) + "/" + unit
		}
		p("  go heap %s → %s: %s", fmtBytes(t.Start.GoHeap), fmtBytes(t.Last.GoHeap), state)
		writeHostSites(p, n, t.HostSites, "    ")
	}
	writePhases(p, n, t.Phases)
}

// writeHostSites writes the places whose host buffers hold a Go heap's
// growth, each with its bytes alive and how many of them are new.
func writeHostSites(p printer, n reportSites, hs []HostSite, indent string) {
	for _, h := range hs {
		grown := ""
		if h.Grown != h.Bytes {
			grown = fmt.Sprintf(" (%s of them since the first sample)", fmtSigned(float64(h.Grown)))
		}
		p("%sheld by host buffers made at %s: %s alive%s", indent, n.short(h.SiteID), fmtBytes(h.Bytes), grown)
	}
}

// writeServiceTracks writes a watched service's tracks: its heap in use
// by site (the blocks: allocated) and the Go heap's own figure, first to
// last sample; a service has no allocator's reserve and no device.
func writeServiceTracks(p printer, t *Tracks) {
	if t.Samples == 0 {
		return
	}
	grows := func(per float64, growing bool) string {
		if growing {
			return "grows " + fmtSigned(per) + "/sample"
		}
		return "flat"
	}
	p("tracks: heap in use by site %s → %s over %d samples: %s", fmtBytes(t.Start.Allocated), fmtBytes(t.Last.Allocated), t.Samples,
		grows(t.AllocatedPerStep, t.Verdict == VerdictAllocated))
	if t.HasGoHeap {
		p("  heap in use (the service's own figure) %s → %s: %s", fmtBytes(t.Start.GoHeap), fmtBytes(t.Last.GoHeap), grows(t.GoHeapPerStep, t.GoHeapGrows))
	}
}

// writePhases writes the cell runs whose tracks grow, each with the
// growing track's rate and figures.
func writePhases(p printer, n reportSites, phases []Phase) {
	for _, ph := range phases[:min(len(phases), textRows)] {
		track, per, from, to := "allocated", ph.AllocatedPerStep, ph.Start.Allocated, ph.Last.Allocated
		switch ph.Verdict {
		case VerdictReserved:
			track, per, from, to = "reserved", ph.ReservedPerStep, ph.Start.Reserved, ph.Last.Reserved
		case VerdictDevice:
			track, per, from, to = "device used", ph.DevicePerStep, ph.Start.DeviceUsed, ph.Last.DeviceUsed
		case VerdictGoHeap:
			track, per, from, to = "go heap", ph.GoHeapPerStep, ph.Start.GoHeap, ph.Last.GoHeap
		}
		p("  in %s: %s; %s %s/%s over %d %ss, %s → %s", n.names.Cell(ph.Cell, 0), verdictText(ph.Verdict), track, fmtSigned(per), ph.Unit, ph.Samples, ph.Unit, fmtBytes(from), fmtBytes(to))
		if ph.GoHeapGrows && ph.Verdict != VerdictGoHeap {
			p("    and the go heap grows %s/%s", fmtSigned(ph.GoHeapPerStep), ph.Unit)
		}
		writeHostSites(p, n, ph.HostSites, "    ")
	}
	if len(phases) > textRows {
		p("  … and %d more cell runs whose tracks grow", len(phases)-textRows)
	}
}

// writeOutside writes the memory taken outside the allocator, when the
// trace took any.
func writeOutside(p printer, o *Outside) {
	if o.Peak == 0 {
		return
	}
	when := "at the end"
	if o.AtTeardown {
		when = "when the teardown began"
	}
	p("  outside the allocator: at most %s at once (seq %d, %s); %s %s", fmtBytes(o.Peak), o.PeakSeq, fmtDuration(o.PeakTimeNS), fmtBytes(o.End), when)
}

func verdictText(v string) string {
	switch v {
	case VerdictAllocated:
		return "allocated grows (live objects accumulate)"
	case VerdictReserved:
		return "reserved grows while allocated does not (cache retention)"
	case VerdictDevice:
		return "device used grows while reserved does not (memory outside the allocator)"
	case VerdictGoHeap:
		return "the Go heap grows while device memory is flat (host memory)"
	}
	return "flat"
}

// fmtBytes and fmtSigned are the byte figures of reports: "24.0 MiB",
// "+24.0 MiB"; fmtBlocks the bytes requested, then the allocator's
// blocks when they differ: "56.0 MiB (98.0 MiB allocated)".
func fmtBytes(n uint64) string { return units.Format(n) }
func fmtBlocks(requested, size uint64) string {
	return units.FormatBlocks(requested, size)
}
func fmtSigned(v float64) string { return units.FormatSigned(v) }

// fmtSpan prints two figures joined by sep ("1.0 MiB → 9.0 MiB", or
// "1.0–2.0 MiB" sizes: one figure when they read the same) as requested,
// then the allocator's blocks beside them when those read differently:
// "1.0 MiB → 9.0 MiB (1.5 MiB → 13.5 MiB allocated)".
func fmtSpan(r0, r1, a0, a1 uint64, sep string) string {
	span := func(x, y uint64) string {
		if sx, sy := fmtBytes(x), fmtBytes(y); sx != sy {
			return sx + sep + sy
		}
		return fmtBytes(x)
	}
	r, a := span(r0, r1), span(a0, a1)
	if r == a {
		return r
	}
	return r + " (" + a + " allocated)"
}

func fmtDuration(ns int64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}
