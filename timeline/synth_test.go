package timeline

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"linger/timeline/event"
)

// synth produces a deterministic, realistic allocator event stream: one
// request of chunked prefill and decode steps through a model of a few
// layers, with per-layer activations and workspaces, KV blocks that grow
// every step, scopes per request/step/layer, counters per step, and a
// caching allocator that hands freed addresses back to the same sizes.
type synth struct {
	sink  event.Sink
	rng   *rand.Rand
	seq   uint64
	time  int64
	strs  map[string]event.StringID
	sites map[string]event.SiteID
	free  map[uint64][]uint64 // cached blocks by size
	bump  uint64
	scope []event.ScopeID
	nsc   event.ScopeID
}

func newSynth(sink event.Sink, seed uint64) *synth {
	return &synth{
		sink:  sink,
		rng:   rand.New(rand.NewPCG(seed, seed+1)),
		strs:  make(map[string]event.StringID),
		sites: make(map[string]event.SiteID),
		free:  make(map[uint64][]uint64),
		bump:  0x7f3a00000000,
	}
}

func (s *synth) str(v string) event.StringID {
	id, ok := s.strs[v]
	if !ok {
		id = event.StringID(len(s.strs) + 1)
		s.strs[v] = id
		s.sink.DefineString(id, v)
	}
	return id
}

func (s *synth) site(fn string, line int) event.SiteID {
	id, ok := s.sites[fn]
	if !ok {
		id = event.SiteID(len(s.sites) + 1)
		s.sites[fn] = id
		s.sink.DefineSite(id, event.Site{Cell: "a1b2c3", Line: 4, Frames: []event.Frame{
			{Func: "linger/engine." + fn, File: "/src/linger/engine/model.go", Line: line},
			{Func: "linger/engine.(*Engine).Generate", File: "/src/linger/engine/engine.go", Line: 120},
		}})
	}
	return id
}

func (s *synth) emit(e event.Event) {
	s.seq++
	s.time += 60 + int64(s.rng.IntN(600))
	e.Seq, e.Time = s.seq, s.time
	if e.Scope == 0 && len(s.scope) > 0 {
		e.Scope = s.scope[len(s.scope)-1]
	}
	s.sink.Emit(e)
}

func (s *synth) begin(kind event.ScopeKind, label string) event.ScopeID {
	var parent event.ScopeID
	if len(s.scope) > 0 {
		parent = s.scope[len(s.scope)-1]
	}
	s.nsc++
	s.emit(event.Event{Kind: event.KindScopeBegin, Expect: kind, Addr: uint64(s.nsc), Extra: uint64(parent), Scope: parent, Label: s.str(label)})
	s.scope = append(s.scope, s.nsc)
	return s.nsc
}

func (s *synth) end(kind event.ScopeKind) {
	id := s.scope[len(s.scope)-1]
	s.scope = s.scope[:len(s.scope)-1]
	var parent event.ScopeID
	if len(s.scope) > 0 {
		parent = s.scope[len(s.scope)-1]
	}
	s.emit(event.Event{Kind: event.KindScopeEnd, Expect: kind, Addr: uint64(id), Scope: parent})
}

type block struct{ e event.Event }

func (s *synth) alloc(req uint64, cat event.Category, expect event.ScopeKind, label, fn string) block {
	size := (req + 511) &^ 511
	var addr uint64
	if l := s.free[size]; len(l) > 0 {
		addr = l[len(l)-1]
		s.free[size] = l[:len(l)-1]
	} else {
		if size > 1<<20 && s.bump%(2<<20) != 0 {
			s.bump += 2<<20 - s.bump%(2<<20)
		}
		addr = s.bump
		s.bump += size
	}
	e := event.Event{Kind: event.KindAlloc, Category: cat, Expect: expect, Addr: addr, Size: size, Requested: req, Label: s.str(label), Site: s.site(fn, 40+len(fn))}
	s.emit(e)
	return block{e}
}

func (s *synth) release(b block) {
	e := b.e
	e.Kind = event.KindFree
	e.Site = s.site("(*Tensor).Release", 12)
	e.Scope = 0
	s.emit(e)
	s.free[e.Size] = append(s.free[e.Size], e.Addr)
}

// request runs one request of promptTokens through layers layers in
// chunks of chunk tokens, then decodes steps tokens.
func (s *synth) request(layers, promptTokens, chunk, steps int) {
	const hidden, kvDim = 2048, 256
	s.begin(event.ScopeRequest, "request")
	kv := make([][2]block, layers)
	tokens := 0
	for step := 0; tokens < promptTokens+steps; step++ {
		n := chunk
		if tokens >= promptTokens {
			n = 1
		}
		tokens += n
		s.begin(event.ScopeStep, fmt.Sprintf("step[%d]", step))
		for l := range layers {
			s.begin(event.ScopeLayer, fmt.Sprintf("layer.%d", l))
			qkv := s.alloc(uint64(n*3*hidden*4), event.CategoryActivation, event.ScopeLayer, fmt.Sprintf("layer.%d.qkv", l), "(*Layer).Forward")
			for h := range 2 {
				name := [2]string{"k", "v"}[h]
				nb := s.alloc(uint64(tokens*kvDim*4), event.CategoryKVCache, event.ScopeRequest, fmt.Sprintf("layer.%d.%s", l, name), "(*KVCache).Append")
				if kv[l][h].e.Size != 0 {
					s.release(kv[l][h])
				}
				kv[l][h] = nb
			}
			ws := s.alloc(uint64(n*tokens*4+64), event.CategoryWorkspace, event.ScopeLayer, "attn.scores", "attention")
			s.release(ws)
			mlp := s.alloc(uint64(n*4*hidden*4), event.CategoryActivation, event.ScopeLayer, fmt.Sprintf("layer.%d.mlp", l), "(*Layer).MLP")
			s.release(qkv)
			s.release(mlp)
			s.end(event.ScopeLayer)
		}
		logits := s.alloc(uint64(32000*4), event.CategoryLogits, event.ScopeStep, "logits", "(*Model).Head")
		s.release(logits)
		s.emit(event.Event{Kind: event.KindCounter, Label: s.str("device_used"), Size: s.bump - 0x7f3a00000000})
		s.end(event.ScopeStep)
	}
	for l := range kv {
		s.release(kv[l][0])
		s.release(kv[l][1])
	}
	s.end(event.ScopeRequest)
}

// recording is an event.Sink that keeps everything, in order.
type recording struct {
	Dict
	events []event.Event
}

func (r *recording) Emit(e event.Event) { r.events = append(r.events, e) }

// record returns the events and definitions of a synthetic trace.
func record(seed uint64, layers, prompt, chunk, steps int) *recording {
	rec := &recording{}
	newSynth(rec, seed).request(layers, prompt, chunk, steps)
	return rec
}

// replay sends rec's definitions and events to sink in a valid order:
// every definition before the first event.
func replay(rec *recording, sink event.Sink) {
	for _, id := range slices.Sorted(maps.Keys(rec.strings)) {
		sink.DefineString(id, rec.strings[id])
	}
	for _, id := range slices.Sorted(maps.Keys(rec.sites)) {
		sink.DefineSite(id, rec.sites[id])
	}
	for _, e := range rec.events {
		sink.Emit(e)
	}
}

// tee sends everything to two sinks.
type tee [2]event.Sink

func (t tee) DefineString(id event.StringID, s string) {
	t[0].DefineString(id, s)
	t[1].DefineString(id, s)
}

func (t tee) DefineSite(id event.SiteID, s event.Site) {
	t[0].DefineSite(id, s)
	t[1].DefineSite(id, s)
}

func (t tee) Emit(e event.Event) {
	t[0].Emit(e)
	t[1].Emit(e)
}
