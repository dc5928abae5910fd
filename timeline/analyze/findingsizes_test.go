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

// TestFindingRequestedSizes: the peak, growth and duplicates findings give
// the bytes the code asked for first and the allocator's blocks beside
// them, in the text and the JSON. A request of 48 steps keeps 24 [100, 3]
// f32 tensors a step (1200 B each, in 1536 B blocks: a multiple of 512)
// and builds a [16, 33] f32 mask a step (2112 B in a 2560 B block) that
// it frees at the step's end.
func TestFindingRequestedSizes(t *testing.T) {
	tr := &memTrace{}
	em := event.NewEmitter(tr, event.EmitterOptions{})
	a := alloc.New(device.NewMeta(0), alloc.Options{Emitter: em})
	site := func(line int) event.SiteID {
		return em.Site(event.Site{Cell: "serve", Line: line, Frames: []event.Frame{{Func: "linger/engine.Alloc", File: "/src/linger/engine/tensor.go", Line: 42}}})
	}
	kvSite, maskSite := site(2), site(3)
	const f32, steps, perStep = 4, 48, 24
	round := func(n uint64) uint64 { return (n + 511) / 512 * 512 }
	kvReq, maskReq := uint64(100*3*f32), uint64(16*33*f32)
	kvBlock, maskBlock := round(kvReq), round(maskReq)

	em.Begin(event.ScopeSession, "session")
	em.Begin(event.ScopeCell, "serve")
	req := em.Begin(event.ScopeRequest, "request 1")
	for s := range steps {
		step := em.Begin(event.ScopeStep, fmt.Sprintf("step %d", s))
		for i := range perStep {
			b, err := a.Alloc(alloc.Request{Size: kvReq, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Label: fmt.Sprintf("stop.%d", s*perStep+i), Site: kvSite})
			if err != nil || b.Size() != kvBlock {
				t.Fatalf("test setup: kv block %v, %v; want %d bytes", b, err, kvBlock)
			}
		}
		m, err := a.Alloc(alloc.Request{Size: maskReq, Category: event.CategoryAttnMask, Expect: event.ScopeStep, Label: "mask", Site: maskSite})
		if err != nil || m.Size() != maskBlock {
			t.Fatalf("test setup: mask block %v, %v; want %d bytes", m, err, maskBlock)
		}
		a.Free(m)
		em.End(step)
	}
	em.End(req)

	rep, err := Run(tr, Options{MinDuplicateBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	both := func(r, s uint64) string { return units.Format(r) + " (" + units.Format(s) + " allocated)" }
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	var g Growth
	for _, x := range rep.Growth {
		if x.Site != "" && x.Category == "kv_cache" {
			g = x
		}
	}
	kvPeak, kvPeakBlocks := uint64(steps*perStep)*kvReq, uint64(steps*perStep)*kvBlock
	at := func(line int) string {
		return fmt.Sprintf("cell 1, line %d ← linger/engine.Alloc engine/tensor.go:42", line)
	}
	for _, line := range []string{
		fmt.Sprintf("  kv_cache   %s/step (%s allocated), %s/s, R² 1.00 over %d steps, %s → %s (%s → %s allocated)  %s",
			units.FormatSigned(float64(perStep*kvReq)), units.FormatSigned(float64(perStep*kvBlock)), units.FormatSigned(g.RequestedPerSecond), steps,
			units.Format(perStep*kvReq), units.Format(kvPeak), units.Format(perStep*kvBlock), units.Format(kvPeakBlocks), at(2)),
		fmt.Sprintf("  attn_mask  \"mask\" %d copies in %d steps, %s each, %s in all; one buffer would save %s  at %s",
			steps, steps, both(maskReq, maskBlock), both(steps*maskReq, steps*maskBlock), both((steps-1)*maskReq, (steps-1)*maskBlock), at(3)),
		fmt.Sprintf("peak: %s in %d objects at seq", both(kvPeak+maskReq, kvPeakBlocks+maskBlock), steps*perStep+1),
		fmt.Sprintf("  kv_cache   %s in %d\n", both(kvPeak, kvPeakBlocks), steps*perStep),
		fmt.Sprintf("  attn_mask  %s in 1  at %s", both(maskReq, maskBlock), at(3)),
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
		Growth []struct {
			Site             string  `json:"site"`
			BytesPerStep     float64 `json:"bytes_per_step"`
			RequestedPerStep float64 `json:"requested_per_step"`
			First            uint64  `json:"first_bytes"`
			FirstRequested   uint64  `json:"first_requested"`
			Last             uint64  `json:"last_bytes"`
			LastRequested    uint64  `json:"last_requested"`
		} `json:"growth"`
		Duplicates []struct {
			MinSize          uint64 `json:"min_size"`
			MinRequested     uint64 `json:"min_requested"`
			MaxRequested     uint64 `json:"max_requested"`
			TotalBytes       uint64 `json:"total_bytes"`
			TotalRequested   uint64 `json:"total_requested"`
			SavedBytes       uint64 `json:"saved_bytes"`
			SavedRequested   uint64 `json:"saved_requested"`
			MaxLiveBytes     uint64 `json:"max_live_bytes"`
			MaxLiveRequested uint64 `json:"max_live_requested"`
		} `json:"duplicates"`
		Peak struct {
			Bytes      uint64 `json:"bytes"`
			Requested  uint64 `json:"requested"`
			ByCategory []struct {
				Category  string `json:"category"`
				Bytes     uint64 `json:"bytes"`
				Requested uint64 `json:"requested"`
			} `json:"by_category"`
			BySite []struct {
				Category  string `json:"category"`
				Bytes     uint64 `json:"bytes"`
				Requested uint64 `json:"requested"`
			} `json:"by_site"`
		} `json:"peak"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, g := range got.Growth {
		if g.Site == "" {
			continue
		}
		if !near(g.RequestedPerStep, perStep*float64(kvReq), 1e-9) || !near(g.BytesPerStep, perStep*float64(kvBlock), 1e-9) ||
			g.FirstRequested != perStep*kvReq || g.First != perStep*kvBlock || g.LastRequested != kvPeak || g.Last != kvPeakBlocks {
			t.Errorf("growth %+v; want %d requested (%d in blocks) a step, from one step's to %d (%d)", g, perStep*kvReq, perStep*kvBlock, kvPeak, kvPeakBlocks)
		}
	}
	if len(got.Duplicates) != 1 {
		t.Fatalf("duplicates %+v, want the mask's family", got.Duplicates)
	}
	d := got.Duplicates[0]
	if d.MinRequested != maskReq || d.MaxRequested != maskReq || d.MinSize != maskBlock ||
		d.TotalRequested != steps*maskReq || d.TotalBytes != steps*maskBlock ||
		d.SavedRequested != (steps-1)*maskReq || d.SavedBytes != (steps-1)*maskBlock ||
		d.MaxLiveRequested != maskReq || d.MaxLiveBytes != maskBlock {
		t.Errorf("duplicates %+v; want %d masks of %d requested in %d-byte blocks", d, steps, maskReq, maskBlock)
	}
	p := got.Peak
	if p.Requested != kvPeak+maskReq || p.Bytes != kvPeakBlocks+maskBlock {
		t.Errorf("peak %d requested in %d bytes, want %d in %d", p.Requested, p.Bytes, kvPeak+maskReq, kvPeakBlocks+maskBlock)
	}
	want := map[string][2]uint64{"kv_cache": {kvPeak, kvPeakBlocks}, "attn_mask": {maskReq, maskBlock}}
	for _, s := range append(p.ByCategory, p.BySite...) {
		if w := want[s.Category]; s.Requested != w[0] || s.Bytes != w[1] {
			t.Errorf("peak share %s: %d requested in %d bytes, want %d in %d", s.Category, s.Requested, s.Bytes, w[0], w[1])
		}
	}
}
