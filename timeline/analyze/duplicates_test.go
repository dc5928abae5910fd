package analyze

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"linger/engine"
	"linger/engine/device"
	"linger/timeline/event"
)

// dupEngine is a qwen2-1.5b-shaped engine on meta: its per-step blocks
// (masks, per-call workspace, batch scratch, KV pages) are large enough
// to pass the duplicates detector's byte threshold.
func dupEngine(t *testing.T, layout engine.KVLayout) (*engine.Engine, *memTrace, *event.Emitter) {
	t.Helper()
	tr := &memTrace{}
	em := event.NewEmitter(tr, event.EmitterOptions{SiteHook: func() event.Where { return event.Where{Cell: "cell-1", Line: 2} }})
	e, err := engine.New(engine.Options{Model: "qwen2-1.5b", Device: device.NewMeta(0), Emitter: em, KVLayout: layout, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return e, tr, em
}

// noDuplicates runs the analyzer over tr and fails on any duplicates
// finding, in the report and in its text.
func noDuplicates(t *testing.T, tr *memTrace) {
	t.Helper()
	rep := noLingering(t, tr)
	for _, d := range rep.Duplicates {
		t.Errorf("duplicate family in a correct run: %d × %s %q (%d–%d B, %d B in all) at %s", d.Count, d.Category, d.Label, d.MinSize, d.MaxSize, d.TotalBytes, d.Site)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\nduplicates: none\n") {
		t.Errorf("text report:\n%s", buf.String())
	}
}

// TestEngineNoDuplicates: the engine's own loops (Generate with many
// chunks and decode steps across page boundaries, on contiguous and paged
// caches; the scheduler serving several requests; Forward with a
// caller's chunk masks taken as views of one full mask) build nothing
// again that one buffer or a view would serve, so the analyzer reports
// no duplicates.
func TestEngineNoDuplicates(t *testing.T) {
	for _, layout := range []engine.KVLayout{engine.KVContiguous, engine.KVPaged} {
		t.Run(fmt.Sprintf("generate/%v", layout), func(t *testing.T) {
			e, tr, _ := dupEngine(t, layout)
			// Ten requests of 4 chunks of 1024 and 15 decode steps: each
			// crosses one page boundary while decoding, so every request
			// adds one KV page from the decode path.
			for i := 0; i < 10; i++ {
				if _, err := e.Generate(context.Background(), engine.Request{Prompt: tokens(4096), ChunkSize: 1024, MaxNewTokens: 16}); err != nil {
					t.Fatal(err)
				}
			}
			e.Close()
			noDuplicates(t, tr)
		})
		t.Run(fmt.Sprintf("scheduler/%v", layout), func(t *testing.T) {
			e, tr, _ := dupEngine(t, layout)
			s, err := engine.NewScheduler(e, engine.SchedulerOptions{MaxBatch: 3})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 12; i++ {
				if _, err := s.Submit(engine.Request{Prompt: tokens(100 + 5*i), ChunkSize: 64, MaxNewTokens: 30 + i}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			e.Close()
			noDuplicates(t, tr)
		})
		t.Run(fmt.Sprintf("forward-views/%v", layout), func(t *testing.T) {
			e, tr, em := dupEngine(t, layout)
			// A notebook cell's loop, in the cell's scope as the kernel
			// runs it: the cache and the mask live for the cell.
			cell := em.Begin(event.ScopeCell, "cell-1")
			const n, c = 2048, 64
			full, err := engine.CausalMask(e.Allocator(), n, n, 0, e.DType(), event.ScopeCell, "full_mask")
			if err != nil {
				t.Fatal(err)
			}
			cache, err := e.NewKVCache(n)
			if err != nil {
				t.Fatal(err)
			}
			p := tokens(n)
			for pos := 0; pos < n; pos += c {
				sc := em.Begin(event.ScopeStep, "chunk")
				rows, err := full.Slice(0, pos, pos+c)
				if err != nil {
					t.Fatal(err)
				}
				m, err := rows.View(c, pos+c)
				if err != nil {
					t.Fatal(err)
				}
				logits, err := e.Forward(p[pos:pos+c], cache, m)
				if err != nil {
					t.Fatal(err)
				}
				logits.Free()
				em.End(sc)
			}
			cache.Free()
			full.Free()
			em.End(cell)
			e.Close()
			noDuplicates(t, tr)
		})
	}
}

// TestDuplicatesMaskPerChunk: scenario 2's leaky form written as a
// notebook would, a fresh causal mask for every chunk of a Forward loop,
// is one duplicates family of every chunk's mask, and says what one
// buffer would save: every mask but the largest, from the shapes. Kept
// alive instead of freed, the same masks are copies alive at once.
func TestDuplicatesMaskPerChunk(t *testing.T) {
	const n, c = 2048, 64
	chunks := n / c
	bf16 := uint64(engine.BF16.Size())
	// Chunk i's mask is [c, (i+1)·c]: its rows of tril(ones(n, n)).
	var total, largest uint64
	for i := range chunks {
		largest = roundUp(uint64(c*(i+1)*c) * bf16)
		total += largest
	}
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			e, tr, em := dupEngine(t, engine.KVContiguous)
			cache, err := e.NewKVCache(n)
			if err != nil {
				t.Fatal(err)
			}
			p := tokens(n)
			var kept []*engine.Tensor
			for pos := 0; pos < n; pos += c {
				sc := em.Begin(event.ScopeStep, "chunk")
				m, err := engine.CausalMask(e.Allocator(), c, pos+c, pos, engine.BF16, event.ScopeCell, "mask")
				if err != nil {
					t.Fatal(err)
				}
				logits, err := e.Forward(p[pos:pos+c], cache, m)
				if err != nil {
					t.Fatal(err)
				}
				logits.Free()
				if keep {
					kept = append(kept, m)
				} else {
					m.Free()
				}
				em.End(sc)
			}
			for _, m := range kept {
				m.Free()
			}
			cache.Free()
			e.Close()
			rep, err := Run(tr, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Duplicates) != 1 {
				t.Fatalf("duplicates %+v, want the masks' family only", rep.Duplicates)
			}
			d := rep.Duplicates[0]
			if d.Category != "attn_mask" || d.Label != "mask" || d.Count != uint64(chunks) || d.Steps != uint64(chunks) || !strings.HasPrefix(d.Site, "cell cell-1:2 ← ") {
				t.Errorf("family %+v, want %d masks labelled mask in %d steps at cell cell-1:2", d, chunks, chunks)
			}
			if d.TotalBytes != total || d.MaxSize != largest || d.SavedBytes != total-largest {
				t.Errorf("family allocates %d B, largest %d, one buffer saves %d; want %d, %d, %d", d.TotalBytes, d.MaxSize, d.SavedBytes, total, largest, total-largest)
			}
			wantLive, wantLiveBytes := uint64(1), largest
			if keep {
				wantLive, wantLiveBytes = uint64(chunks), total
			}
			if d.MaxLive != wantLive || d.MaxLiveBytes != wantLiveBytes {
				t.Errorf("at most %d alive at once (%d B), want %d (%d B)", d.MaxLive, d.MaxLiveBytes, wantLive, wantLiveBytes)
			}
			var buf bytes.Buffer
			rep.WriteText(&buf)
			if want := "one buffer would save " + fmtBytes(total-largest); !strings.Contains(buf.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, buf.String())
			}
		})
	}
}

// TestDuplicatesTextTellsApart: two families whose sites agree on the
// cell line and first frame (the k and v tensors of one loop) print as
// lines that differ: each names its labels, and its site as far as the
// frame that tells them apart.
func TestDuplicatesTextTellsApart(t *testing.T) {
	b := newBuilder(t)
	frames := func(line int) []event.Frame {
		return []event.Frame{
			{Func: "linger/engine.(*kvBase).alloc", File: "/src/linger/engine/kv.go", Line: 150},
			{Func: "linger/engine.(*contiguousKV).reserve", File: "/src/linger/engine/kv.go", Line: line},
			{Func: "linger/engine.(*Engine).forward", File: "/src/linger/engine/forward.go", Line: 38},
		}
	}
	k := b.em.Site(event.Site{Cell: "c", Line: 4, Frames: frames(228)})
	v := b.em.Site(event.Site{Cell: "c", Line: 4, Frames: frames(233)})
	for i := 0; i < 16; i++ {
		st := b.em.Begin(event.ScopeStep, "step")
		ka := b.alloc(MiB, event.CategoryKVCache, event.ScopeStep, fmt.Sprintf("layer.%d.k", i), k)
		va := b.alloc(MiB, event.CategoryKVCache, event.ScopeStep, fmt.Sprintf("layer.%d.v", i), v)
		b.free(ka)
		b.free(va)
		b.em.End(st)
	}
	rep := b.run(Options{DuplicateCategories: []event.Category{event.CategoryKVCache}})
	if len(rep.Duplicates) != 2 {
		t.Fatalf("duplicates %+v, want k's and v's", rep.Duplicates)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	var lines []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "  kv_cache") && strings.Contains(l, "copies") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || lines[0] == lines[1] {
		t.Fatalf("duplicates lines %q, want two that differ", lines)
	}
	for _, want := range []string{`"layer.*.k"`, `"layer.*.v"`, "kv.go:228", "kv.go:233"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text lacks %s:\n%s", want, buf.String())
		}
	}
}
