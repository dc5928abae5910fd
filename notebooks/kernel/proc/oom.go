package proc

import (
	"errors"
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/engine/alloc"
	"linger/timeline/event"
)

// oomValue is an *alloc.OOMError in err as a Starlark struct, or None:
// struct(requested, size, category, label, limit, reserved, allocated,
// device_free, live=[struct(category, bytes, blocks)],
// top_labels=[struct(label, category, bytes, blocks)]).
func oomValue(err error) starlark.Value {
	var oe *alloc.OOMError
	if !errors.As(err, &oe) {
		return starlark.None
	}
	live := make([]starlark.Value, len(oe.Live))
	for i, c := range oe.Live {
		live[i] = starlarkstruct.FromStringDict(starlark.String("usage"), starlark.StringDict{
			"category": starlark.String(c.Category.String()), "bytes": starlark.MakeUint64(c.Bytes), "blocks": starlark.MakeInt(c.Blocks)})
	}
	top := make([]starlark.Value, len(oe.TopLabels))
	for i, l := range oe.TopLabels {
		top[i] = starlarkstruct.FromStringDict(starlark.String("usage"), starlark.StringDict{
			"label": starlark.String(l.Label), "category": starlark.String(l.Category.String()),
			"bytes": starlark.MakeUint64(l.Bytes), "blocks": starlark.MakeInt(l.Blocks)})
	}
	return starlarkstruct.FromStringDict(starlark.String("oom"), starlark.StringDict{
		"requested": starlark.MakeUint64(oe.Requested), "size": starlark.MakeUint64(oe.Size),
		"category": starlark.String(oe.Category.String()), "label": starlark.String(oe.Label),
		"limit": starlark.MakeUint64(oe.Limit), "reserved": starlark.MakeUint64(oe.Reserved),
		"allocated": starlark.MakeUint64(oe.Allocated), "device_free": starlark.MakeUint64(oe.Free),
		"live": starlark.NewList(live), "top_labels": starlark.NewList(top),
	})
}

// failedValue is what generate(on_error="return") returns for a failed
// call: struct(error=text, oom=oomValue(err)).
func failedValue(err error) starlark.Value {
	return starlarkstruct.FromStringDict(starlark.String("failed"), starlark.StringDict{
		"error": starlark.String(err.Error()), "oom": oomValue(err)})
}

// snapshotBlocks are a segment's blocks for mem.snapshot():
// [struct(addr, size, requested, allocated, category, label, site)], site
// as "cell:line" when a cell made it, else the site's text.
func (rt *runtime) snapshotBlocks(bs []alloc.BlockInfo) starlark.Value {
	out := make([]starlark.Value, len(bs))
	for i, b := range bs {
		site := ""
		if b.Allocated && b.Site != 0 {
			if s, ok := rt.sink.site(b.Site); ok {
				if s.Cell != "" {
					site = fmt.Sprintf("%s:%d", s.Cell, s.Line)
				} else {
					site = s.String()
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

// site resolves a site id the kernel's Emitter defined.
func (s *pipeSink) site(id event.SiteID) (event.Site, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dict.Site(id)
}
