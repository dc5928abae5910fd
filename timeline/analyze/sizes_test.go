package analyze

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/internal/units"
	"linger/timeline/event"
)

// TestRequestedSizes: findings give the bytes the code asked for first and
// the allocator's blocks beside them, in the text and the JSON. A request
// keeps a [2900, 1024] f32 cache in a cached 12 MiB block (what is left,
// 704 KiB, is too small to split off in the large pool, so the whole
// block is handed out) and 24 per-layer [150] f32 scales (600 B, rounded
// to 1 KiB in the small pool); all outlive it to the end.
func TestRequestedSizes(t *testing.T) {
	tr := &memTrace{}
	em := event.NewEmitter(tr, event.EmitterOptions{})
	a := alloc.New(device.NewMeta(0), alloc.Options{Emitter: em})
	var sites [4]event.SiteID
	for line := 1; line < len(sites); line++ {
		sites[line] = em.Site(event.Site{Cell: "serve", Line: line, Frames: []event.Frame{{Func: "linger/engine.Alloc", File: "/src/linger/engine/tensor.go", Line: 42}}})
	}
	site := func(line int) event.SiteID { return sites[line] }
	must := func(b *alloc.Block, err error) *alloc.Block {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	const f32 = 4
	cacheReq := uint64(2900 * 1024 * f32)
	scaleReq := uint64(150 * f32)
	const layers = 24
	// A first request's 12 MiB block leaves a cached 12 MiB segment
	// (requests of 10 MiB and more get segments rounded to 2 MiB).
	const warm = 12 << 20
	cacheBlock := (uint64(warm) + alloc.RoundLarge - 1) / alloc.RoundLarge * alloc.RoundLarge
	if cacheBlock-cacheReq > alloc.SmallSize {
		t.Fatalf("test setup: %d bytes left in the block would be split off", cacheBlock-cacheReq)
	}
	scaleBlock := (scaleReq + alloc.MinBlockSize - 1) / alloc.MinBlockSize * alloc.MinBlockSize

	sess := em.Begin(event.ScopeSession, "session")
	cell := em.Begin(event.ScopeCell, "serve")
	a.Free(must(a.Alloc(alloc.Request{Size: warm, Category: event.CategoryActivation, Expect: event.ScopeCell, Label: "warm", Site: site(1)})))
	req := em.Begin(event.ScopeRequest, "request 1")
	cache := must(a.Alloc(alloc.Request{Size: cacheReq, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: "cache.k", Site: site(2)}))
	for i := range layers {
		must(a.Alloc(alloc.Request{Size: scaleReq, Category: event.CategoryOther, Expect: event.ScopeRequest, Label: fmt.Sprintf("layer.%d.scale", i), Site: site(3)}))
	}
	em.End(req)
	em.End(cell)
	_ = sess
	if cache.Size() != cacheBlock {
		t.Fatalf("test setup: the cache's block is %d bytes, want the whole cached %d", cache.Size(), cacheBlock)
	}

	rep, err := Run(tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req0, size0 := cacheReq+layers*scaleReq, cacheBlock+layers*scaleBlock
	both := func(r, s uint64) string { return units.Format(r) + " (" + units.Format(s) + " allocated)" }
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		fmt.Sprintf("lingering: %d objects, %s; leaked %d, %s; none freed late", layers+1, both(req0, size0), layers+1, both(req0, size0)),
		fmt.Sprintf("  kv_cache   %s in 1 objects, leaked %s  at cell 1, line 2 ← linger/engine.Alloc engine/tensor.go:42", both(cacheReq, cacheBlock), both(cacheReq, cacheBlock)),
		fmt.Sprintf("  other      %s in %d objects, leaked %s  at cell 1, line 3 ← linger/engine.Alloc engine/tensor.go:42", both(layers*scaleReq, layers*scaleBlock), layers, both(layers*scaleReq, layers*scaleBlock)),
		fmt.Sprintf("  - kv_cache \"cache.k\" %s, expected to die with request \"request 1\"", both(cacheReq, cacheBlock)),
		fmt.Sprintf("  - other \"layer.0.scale\" %s, expected to die with request \"request 1\"", both(scaleReq, scaleBlock)),
	} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, text.String())
		}
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Lingering struct {
			Bytes           uint64 `json:"bytes"`
			Requested       uint64 `json:"requested"`
			LeakedBytes     uint64 `json:"leaked_bytes"`
			LeakedRequested uint64 `json:"leaked_requested"`
			BySite          []struct {
				Category        string `json:"category"`
				Bytes           uint64 `json:"bytes"`
				Requested       uint64 `json:"requested"`
				LeakedRequested uint64 `json:"leaked_requested"`
			} `json:"by_site"`
			Objects []struct {
				Label     string `json:"label"`
				Size      uint64 `json:"size"`
				Requested uint64 `json:"requested"`
			} `json:"objects"`
		} `json:"lingering"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	l := got.Lingering
	if l.Requested != req0 || l.Bytes != size0 || l.LeakedRequested != req0 || l.LeakedBytes != size0 {
		t.Errorf("lingering requested %d, bytes %d, leaked %d / %d; want %d requested in %d bytes, all leaked", l.Requested, l.Bytes, l.LeakedRequested, l.LeakedBytes, req0, size0)
	}
	want := map[string][2]uint64{"kv_cache": {cacheReq, cacheBlock}, "other": {layers * scaleReq, layers * scaleBlock}}
	for _, s := range l.BySite {
		if w := want[s.Category]; s.Requested != w[0] || s.Bytes != w[1] || s.LeakedRequested != w[0] {
			t.Errorf("by_site %s: requested %d (leaked %d) in %d bytes, want %d in %d", s.Category, s.Requested, s.LeakedRequested, s.Bytes, w[0], w[1])
		}
	}
	for _, o := range l.Objects {
		w := [2]uint64{scaleReq, scaleBlock}
		if o.Label == "cache.k" {
			w = [2]uint64{cacheReq, cacheBlock}
		}
		if o.Requested != w[0] || o.Size != w[1] {
			t.Errorf("object %s: requested %d in %d bytes, want %d in %d", o.Label, o.Requested, o.Size, w[0], w[1])
		}
	}
}
