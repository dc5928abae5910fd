package analyze_test

import (
	"fmt"
	"os"

	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

// A sink feeds the analyzer live; here a request keeps a 1 MiB cache past
// its end.
func ExampleAnalyzer() {
	s := &sink{a: analyze.New(analyze.Options{})}
	em := event.NewEmitter(s, event.EmitterOptions{})
	req := em.Begin(event.ScopeRequest, "request 1")
	em.Emit(event.Event{Kind: event.KindAlloc, Addr: 0x7f00, Size: 1 << 20, Category: event.CategoryKVCache,
		Expect: event.ScopeRequest, Label: em.Intern("layer.0.k"), Site: em.Site(event.Site{Cell: "a1", Line: 3})})
	em.End(req)

	rep := s.a.Report(&s.names)
	o := rep.Lingering.Objects[0]
	fmt.Printf("%d lingering, %d bytes: %s %s outlived %s %q\n", rep.Lingering.Count, rep.Lingering.Bytes, o.Category, o.Label, o.ScopeKind, o.ScopeLabel)
	// Output: 1 lingering, 1048576 bytes: kv_cache layer.0.k outlived request "request 1"
}

// Run analyzes a trace file; a torn tail is analyzed up to its last
// complete frame, and the report says so.
func ExampleRun() {
	f, err := timeline.OpenFile("trace.ltrace")
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := analyze.Options{}
	if err := f.Stop(); err != nil {
		opts.Truncated = err.Error()
	}
	rep, err := analyze.Run(f, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	rep.WriteText(os.Stdout)
}

// sink keeps the names a report needs and hands events to the analyzer.
type sink struct {
	names timeline.Dict
	a     *analyze.Analyzer
}

func (s *sink) DefineString(id event.StringID, v string) {
	s.names.DefineString(id, v)
	s.a.DefineString(id, v)
}

func (s *sink) DefineSite(id event.SiteID, v event.Site) { s.names.DefineSite(id, v) }

func (s *sink) Emit(e event.Event) { s.a.Add(e) }
