package kernel

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/timeline/event"
)

// timelineModule is the "timeline" module: marks, scopes and verdicts on
// the kernel's own event stream.
//
//	timeline.mark(label) → seq
//	timeline.lingering() → lingering: [struct(addr, size, requested, category, label, site, holder, cell)]
//	                       with .groups, .count, .size, .requested; a table by holder as a result
//	timeline.scope(kind, label, fn, *args, **kwargs) → fn(*args, **kwargs)
//	timeline.tracks(fn, *args, **kwargs) → struct(verdict, ..., result)
//	timeline.plot(cell=False, width=800, height=300) → plot: memory over the session or a cell,
//	                       an SVG, a PNG and a summary line as a result
var timelineModule = &starlarkstruct.Module{
	Name: "timeline",
	Members: starlark.StringDict{
		"mark":      starlark.NewBuiltin("timeline.mark", timelineMark),
		"lingering": starlark.NewBuiltin("timeline.lingering", timelineLingering),
		"scope":     starlark.NewBuiltin("timeline.scope", timelineScope),
		"tracks":    starlark.NewBuiltin("timeline.tracks", timelineTracks),
		"plot":      starlark.NewBuiltin("timeline.plot", timelinePlot),
	},
}

func timelineMark(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var label string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "label", &label); err != nil {
		return nil, err
	}
	return starlark.MakeUint64(sessionOf(thread).em.Mark(label)), nil
}

// timelineLingering lists the live lingering objects, each with the path
// that holds it (see retain.go), as a lingeringTable: a sequence of
// structs for code, a table by holder as a cell's result.
func timelineLingering(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	s := sessionOf(thread)
	return newLingeringTable(s.lingering()), nil
}

// timelineScope runs fn(*args, **kwargs) inside a scope of the given kind:
// timeline.scope(kind, label, fn, *args, **kwargs) → fn's result. The
// scope ends on every path, when fn fails too, so that a cell cannot leave
// one open (Starlark has no with statement). Only the kinds a user's own
// loop has are allowed: cells, the session and engines are the kernel's.
func timelineScope(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	if len(args) < 3 {
		return nil, fmt.Errorf("%s: want (kind, label, fn, *args, **kwargs), got %d positional arguments", b.Name(), len(args))
	}
	kindName, ok := starlark.AsString(args[0])
	if !ok {
		return nil, fmt.Errorf("%s: kind must be a string, not %s", b.Name(), args[0].Type())
	}
	label, ok := starlark.AsString(args[1])
	if !ok {
		return nil, fmt.Errorf("%s: label must be a string, not %s", b.Name(), args[1].Type())
	}
	fn, ok := args[2].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("%s: fn must be callable, not %s", b.Name(), args[2].Type())
	}
	kind, err := event.ParseScopeKind(kindName)
	if err != nil || (kind != event.ScopeLayer && kind != event.ScopeStep && kind != event.ScopeRequest && kind != event.ScopeBatch) {
		return nil, fmt.Errorf("%s: kind %q: want \"layer\", \"step\", \"request\" or \"batch\" (cells, the session and engines have their own scopes)", b.Name(), kindName)
	}
	id := s.em.Begin(kind, label)
	defer s.em.End(id)
	return starlark.Call(thread, fn, args[3:], kwargs)
}

// timelineTracks runs fn(*args, **kwargs) while a fresh analyzer watches
// the events it causes, and returns that analyzer's tracks verdict:
// timeline.tracks(fn, *args, **kwargs) → struct(verdict, allocated_per_step,
// reserved_per_step, device_used_per_step, go_heap_per_step,
// go_heap_grows, allocated, reserved, device_used, go_heap, samples,
// result). The analyzer starts from nothing: the slopes (per growth sample:
// step ends, else request or cell ends) and the verdict are over fn's run
// alone; the four values are the tracks' changes over it (end minus
// start).
func timelineTracks(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	if len(args) < 1 {
		return nil, fmt.Errorf("%s: want (fn, *args, **kwargs)", b.Name())
	}
	fn, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("%s: fn must be callable, not %s", b.Name(), args[0].Type())
	}
	w := s.sink.watch()
	start := s.trackValues()
	res, err := starlark.Call(thread, fn, args[1:], kwargs)
	end := s.trackValues()
	tk := s.sink.unwatch(w).Tracks
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = starlark.None
	}
	diff := func(i int) starlark.Value { return starlark.MakeInt64(int64(end[i]) - int64(start[i])) }
	return starlarkstruct.FromStringDict(starlark.String("tracks"), starlark.StringDict{
		"verdict":              starlark.String(tk.Verdict),
		"allocated_per_step":   starlark.Float(tk.AllocatedPerStep),
		"reserved_per_step":    starlark.Float(tk.ReservedPerStep),
		"device_used_per_step": starlark.Float(tk.DevicePerStep),
		"go_heap_per_step":     starlark.Float(tk.GoHeapPerStep),
		"go_heap_grows":        starlark.Bool(tk.GoHeapGrows),
		"allocated":            diff(0), "reserved": diff(1), "device_used": diff(2), "go_heap": diff(3),
		"result": res,
	}), nil
}

// trackValues are the tracks now, as the kernel's allocators, devices and
// Go heap report them: allocated, reserved, device used, Go heap.
func (s *session) trackValues() [4]uint64 {
	var v [4]uint64
	for _, a := range s.allocators() {
		st := a.Stats()
		v[0] += st.Allocated
		v[1] += st.Reserved
		free, total := a.Device().MemInfo()
		v[2] += total - free
	}
	v[3] = s.samp.read()
	return v
}
