package kernel

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine/alloc"
	"linger/timeline/event"
)

// memModule is the "mem" module: the kernel's first allocator and its
// device.
//
//	mem.stats() → struct(allocated, peak_allocated, reserved, ..., by_category, outside)
//	mem.empty_cache(): every allocator's cached segments back to the device
//	mem.snapshot() → struct(limit, device_free, device_total, stats, segments=[...])
//	mem.device() → struct(name, free, total, used)
//	mem.take_outside(bytes, label="outside", expect="cell") → OutsideMemory
//
// Memory taken outside the allocator is an object with a lifetime, as a
// block is: recorded with the cell line that took it and the scope it is
// expected to be given back in (expect=, "cell" by default, as tensor()),
// judged lingering when that scope ends with it still taken (category
// "outside" in the report), named by the retention walk (global taken[3]
// → OutsideMemory#4) and counted by linger run's --max-lingering. The
// kernel's teardown gives back what is still taken.
var memModule = &starlarkstruct.Module{
	Name: "mem",
	Members: starlark.StringDict{
		"stats":        starlark.NewBuiltin("mem.stats", memStats),
		"empty_cache":  starlark.NewBuiltin("mem.empty_cache", memEmptyCache),
		"snapshot":     starlark.NewBuiltin("mem.snapshot", memSnapshot),
		"device":       starlark.NewBuiltin("mem.device", memDevice),
		"take_outside": starlark.NewBuiltin("mem.take_outside", memTakeOutside),
	},
}

func memStats(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	return statsValue(sessionOf(thread).mainAllocator().Stats()), nil
}

func statsValue(s alloc.Stats) starlark.Value {
	byCat := starlark.NewDict(event.NumCategories)
	for c := 0; c < event.NumCategories; c++ {
		if s.ByCategory[c] != 0 || s.PeakByCategory[c] != 0 {
			_ = byCat.SetKey(starlark.String(event.Category(c).String()), starlark.MakeUint64(s.ByCategory[c]))
		}
	}
	return starlarkstruct.FromStringDict(starlark.String("stats"), starlark.StringDict{
		"allocated": starlark.MakeUint64(s.Allocated), "peak_allocated": starlark.MakeUint64(s.PeakAllocated),
		"reserved": starlark.MakeUint64(s.Reserved), "peak_reserved": starlark.MakeUint64(s.PeakReserved),
		"active": starlark.MakeUint64(s.Active), "requested": starlark.MakeUint64(s.Requested),
		"num_allocs": starlark.MakeUint64(s.NumAllocs), "num_frees": starlark.MakeUint64(s.NumFrees),
		"num_ooms": starlark.MakeUint64(s.NumOOMs), "by_category": byCat,
		"outside": starlark.MakeUint64(s.Outside),
	})
}

func memEmptyCache(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	for _, a := range sessionOf(thread).allocators() {
		a.EmptyCache()
	}
	return starlark.None, nil
}

func memSnapshot(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	snap := s.mainAllocator().Snapshot()
	segs := make([]starlark.Value, 0, len(snap.Segments))
	for _, sg := range snap.Segments {
		segs = append(segs, starlarkstruct.FromStringDict(starlark.String("struct"), starlark.StringDict{
			"addr": starlark.MakeUint64(sg.Addr), "size": starlark.MakeUint64(sg.Size), "pool": starlark.MakeUint64(sg.Pool),
			"allocated": starlark.MakeUint64(sg.Allocated), "requested": starlark.MakeUint64(sg.Requested),
			"blocks": s.snapshotBlocks(sg.Blocks),
		}))
	}
	return starlarkstruct.FromStringDict(starlark.String("snapshot"), starlark.StringDict{
		"limit": starlark.MakeUint64(snap.Limit), "device_free": starlark.MakeUint64(snap.DeviceFree),
		"device_total": starlark.MakeUint64(snap.DeviceTotal), "stats": statsValue(snap.Stats),
		"segments": starlark.NewList(segs),
	}), nil
}

// snapshotBlocks are a segment's blocks for mem.snapshot():
// [struct(addr, size, requested, allocated, category, label, site)], site
// as "cell:line" when a cell made it, else the site's text.
func (s *session) snapshotBlocks(bs []alloc.BlockInfo) starlark.Value {
	out := make([]starlark.Value, len(bs))
	for i, b := range bs {
		site := ""
		if b.Allocated && b.Site != 0 {
			if st, ok := s.sink.site(b.Site); ok {
				if st.Cell != "" {
					site = fmt.Sprintf("%s:%d", st.Cell, st.Line)
				} else {
					site = st.String()
				}
			}
		}
		cat := ""
		if b.Allocated {
			cat = b.Category.String()
		}
		out[i] = starlarkstruct.FromStringDict(starlark.String("block"), starlark.StringDict{
			"addr": starlark.MakeUint64(b.Addr), "size": starlark.MakeUint64(b.Size),
			"requested": starlark.MakeUint64(b.Requested), "allocated": starlark.Bool(b.Allocated),
			"category": starlark.String(cat), "label": starlark.String(b.LabelText), "site": starlark.String(site),
		})
	}
	return starlark.NewList(out)
}

func memDevice(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	d := s.mainAllocator().Device()
	free, total := d.MemInfo()
	u := s.budget.read(false)
	return starlarkstruct.FromStringDict(starlark.String("device"), starlark.StringDict{
		"name": starlark.String(d.Name()), "free": starlark.MakeUint64(free), "total": starlark.MakeUint64(total),
		"used":   starlark.MakeUint64(total - free),
		"budget": starlark.MakeUint64(s.budget.limit), "budget_used": starlark.MakeUint64(u.total()),
	}), nil
}

// memTakeOutside takes device memory beside the caching allocator, as a
// library calling cudaMalloc directly would: counted under the limit and
// on the device-used track, not on reserved.
func memTakeOutside(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	s := sessionOf(thread)
	var size starlark.Value
	label, expect := "outside", "cell"
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "bytes", &size, "label?", &label, "expect?", &expect); err != nil {
		return nil, err
	}
	n, err := sizeArg(size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	exp, err := event.ParseScopeKind(expect)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	a := s.mainAllocator()
	o, err := a.TakeOutsideFor(n, label, exp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name(), err)
	}
	m := &OutsideMemory{o: o}
	s.mu.Lock()
	m.n = s.id("outside")
	s.outside = append(s.outside, m)
	s.mu.Unlock()
	return m, nil
}

// OutsideMemory is device memory taken beside the caching allocator, until
// released.
type OutsideMemory struct {
	o *alloc.Outside
	n int
}

var (
	_ starlark.HasAttrs = (*OutsideMemory)(nil)
	_ referrer          = (*OutsideMemory)(nil)
)

var outsideMethods = methods{
	"release": starlark.NewBuiltin("release", outsideRelease),
}

var outsideAttrs = outsideMethods.attrNames("bytes", "label", "live")

func (m *OutsideMemory) String() string {
	return fmt.Sprintf("OutsideMemory#%d(%q, %d bytes, live=%t)", m.n, m.o.Label(), m.o.Size(), m.o.Live())
}
func (m *OutsideMemory) Type() string          { return "OutsideMemory" }
func (m *OutsideMemory) Freeze()               {}
func (m *OutsideMemory) Truth() starlark.Bool  { return true }
func (m *OutsideMemory) Hash() (uint32, error) { return unhashable(m) }
func (m *OutsideMemory) AttrNames() []string   { return outsideAttrs }

func (m *OutsideMemory) Attr(name string) (starlark.Value, error) {
	switch name {
	case "bytes":
		return starlark.MakeUint64(m.o.Size()), nil
	case "label":
		return starlark.String(m.o.Label()), nil
	case "live":
		return starlark.Bool(m.o.Live()), nil
	}
	return outsideMethods.bound(m, name), nil
}

func (m *OutsideMemory) pathName() string             { return fmt.Sprintf("OutsideMemory#%d", m.n) }
func (m *OutsideMemory) refs(yield func(string, any)) { yield("", m.o) }

func outsideRelease(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	m := b.Receiver().(*OutsideMemory)
	if err := m.o.Release(); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	s := sessionOf(thread)
	s.mu.Lock()
	s.outside = without(s.outside, m)
	s.mu.Unlock()
	return starlark.None, nil
}
