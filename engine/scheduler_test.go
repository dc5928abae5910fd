package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"linger/timeline/event"
)

func TestSchedulerMatchesSolo(t *testing.T) {
	batchesBy := map[bool]int{}
	for _, tc := range []struct {
		layout KVLayout
		static bool
	}{{KVContiguous, false}, {KVPaged, false}, {KVPaged, true}} {
		layout := tc.layout
		t.Run(fmt.Sprintf("%v/static=%v", layout, tc.static), func(t *testing.T) {
			sink := newRecSink(true)
			e := newTestEngine(t, preset(t, "tiny"), layout, event.NewEmitter(sink, event.EmitterOptions{}))
			reqs := []Request{
				{Prompt: prompt(5, 4096, 1), MaxNewTokens: 9, ChunkSize: 4},
				{Prompt: prompt(40, 4096, 2), MaxNewTokens: 3, ChunkSize: 16},
				{Prompt: prompt(17, 4096, 3), MaxNewTokens: 12, ChunkSize: 8},
				{Prompt: prompt(9, 4096, 4), MaxNewTokens: 1, ChunkSize: 9},
				{Prompt: prompt(23, 4096, 5), MaxNewTokens: 6, ChunkSize: 5},
				{Prompt: prompt(3, 4096, 6), MaxNewTokens: 0, ChunkSize: 2},
			}
			var solo [][]int
			for _, r := range reqs {
				res, err := e.Generate(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				solo = append(solo, res.Tokens)
			}
			base := e.a.Stats().Allocated
			s, err := NewScheduler(e, SchedulerOptions{MaxBatch: 3, Static: tc.static})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range reqs {
				id, err := s.Submit(r)
				if err != nil || id != i+1 {
					t.Fatalf("Submit = %d, %v", id, err)
				}
			}
			done, err := s.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(done) != len(reqs) {
				t.Fatalf("%d completions", len(done))
			}
			for _, c := range done {
				if c.Err != nil {
					t.Fatalf("request %d: %v", c.ID, c.Err)
				}
				if want := solo[c.ID-1]; !slices.Equal(c.Result.Tokens, want) {
					t.Errorf("request %d: batched %v, solo %v", c.ID, c.Result.Tokens, want)
				}
			}
			st := e.a.Stats()
			if st.ByCategory[event.CategoryBatchScratch] != 0 || st.Allocated != base {
				t.Errorf("after the batch: batch_scratch %d, allocated %d (base %d)", st.ByCategory[event.CategoryBatchScratch], st.Allocated, base)
			}
			batches, scratch := 0, 0
			for _, ev := range sink.Events() {
				if ev.Kind == event.KindScopeBegin && ev.Expect == event.ScopeBatch {
					batches++
				}
				if ev.Kind == event.KindAlloc && ev.Category == event.CategoryBatchScratch {
					scratch++
					if ev.Expect != event.ScopeBatch {
						t.Errorf("batch scratch expects %v", ev.Expect)
					}
				}
			}
			batchesBy[tc.static] = batches
			if batches == 0 || scratch != 2*batches {
				t.Errorf("%d batches, %d scratch allocations", batches, scratch)
			}
			for _, o := range sink.lingering {
				t.Errorf("lingering %+v", o)
			}
		})
	}
	// Continuous batching fills freed slots at once: fewer iterations.
	if batchesBy[true] <= batchesBy[false] {
		t.Errorf("static batching took %d iterations, continuous %d", batchesBy[true], batchesBy[false])
	}
}

func TestSchedulerCancel(t *testing.T) {
	e := newTestEngine(t, preset(t, "tiny"), KVPaged, nil)
	base := e.a.Stats().Allocated
	s, _ := NewScheduler(e, SchedulerOptions{MaxBatch: 2})
	for i := 0; i < 4; i++ {
		if _, err := s.Submit(Request{Prompt: prompt(10, 4096, i), MaxNewTokens: 50, ChunkSize: 4}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if got := e.a.Stats().Allocated; got != base || s.Pending() != 0 {
		t.Errorf("allocated %d (base %d), pending %d", got, base, s.Pending())
	}
	if _, err := s.Submit(Request{ChunkSize: 4}); !errors.Is(err, ErrBadRequest) || err.Error() != "submit: bad request: prompt is empty" {
		t.Errorf("Submit of an empty prompt: %v, want ErrBadRequest saying \"submit: bad request: prompt is empty\"", err)
	}
}

func TestBatchContextLeak(t *testing.T) {
	sink := newRecSink(false)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	a := newCPU(t, em)
	for i, closeIt := range []bool{true, false} {
		sc := em.Begin(event.ScopeBatch, "batch")
		bc := NewBatchContext(a, F32)
		if _, err := bc.Alloc([]int{8, 64}, "scratch"); err != nil {
			t.Fatal(err)
		}
		if closeIt {
			bc.Close()
			bc.Close()
			if _, err := bc.Alloc([]int{1}, "late"); !errors.Is(err, ErrFreed) {
				t.Errorf("Alloc after Close: %v", err)
			}
		}
		em.End(sc)
		if got := len(sink.lingering); got != i {
			t.Errorf("round %d: %d lingering, want %d", i, got, i)
		}
	}
}

func TestWorkspaceGuard(t *testing.T) {
	sink := newRecSink(false)
	em := event.NewEmitter(sink, event.EmitterOptions{})
	e := newTestEngine(t, preset(t, "tiny"), KVContiguous, em)
	ws := e.Workspace()
	if ws.Bytes() != uint64(attnWorkers*e.cfg.MaxContext*4) {
		t.Errorf("workspace %d bytes", ws.Bytes())
	}
	call := func(leak bool) error {
		sc := em.Begin(event.ScopeStep, "call")
		defer em.End(sc)
		g, err := ws.Acquire(4)
		if err != nil {
			return err
		}
		if leak {
			return errors.New("early return") // the guard is never released
		}
		defer g.Release()
		g.Release() // explicit and deferred releases are both fine
		return nil
	}
	call(false)
	if ws.Outstanding() != 0 || len(sink.lingering) != 0 {
		t.Errorf("released path: outstanding %d, lingering %d", ws.Outstanding(), len(sink.lingering))
	}
	call(true)
	if ws.Outstanding() != 1 || len(sink.lingering) != 1 || sink.lingering[0].cat != event.CategoryWorkspace {
		t.Errorf("leaky path: outstanding %d, lingering %+v", ws.Outstanding(), sink.lingering)
	}
	// A leaked guard does not block the engine.
	if _, err := e.Generate(context.Background(), Request{Prompt: []int{1, 2}, MaxNewTokens: 2, ChunkSize: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Acquire(0); err == nil {
		t.Error("Acquire(0) accepted")
	}
	e.Close()
	if err := ws.Free(); !errors.Is(err, ErrFreed) {
		t.Errorf("Free after Close = %v", err)
	}
	if _, err := ws.Acquire(1); !errors.Is(err, ErrFreed) {
		t.Errorf("Acquire after Free = %v", err)
	}
	if _, err := e.Generate(context.Background(), Request{Prompt: []int{1}, ChunkSize: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Generate after Close = %v", err)
	}
}
