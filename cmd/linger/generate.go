package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"linger/internal/units"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/tokenizer"
	"linger/timeline"
	"linger/timeline/event"
)

func runGenerate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", stderr)
	var (
		model        = fs.String("model", "tiny", "model preset: "+strings.Join(engine.PresetNames(), ", "))
		dev          = fs.String("device", "meta", "device: meta (accounting only) or cpu (real compute)")
		promptTokens = fs.Int("prompt-tokens", 0, "a synthetic prompt of `N` tokens (seeded random ids)")
		prompt       = fs.String("prompt", "", "prompt `text`, tokenized with the built-in tokenizer or --tokenizer")
		maxNew       = fs.Int("max-new-tokens", 16, "tokens to generate at most")
		chunk        = fs.Int("chunk-size", 2048, "prefill chunk length in tokens")
		tracePath    = fs.String("trace", "", "write the trace log to `FILE` (.ltrace)")
		dtypeName    = fs.String("dtype", "", "element type: f32, bf16, f16 (default bf16 on meta, f32 on cpu)")
		capacity     = fs.String("capacity", "", "device capacity, e.g. 80GiB (default: 80GiB on meta, the machine's memory on cpu)")
		limit        = fs.String("memory-limit", "", "allocator limit, simulating a smaller card, e.g. 16GiB")
		kvLayout     = fs.String("kv", "contiguous", "KV cache layout: contiguous or paged (16-token blocks)")
		weights      = fs.String("weights", "", "load weights from a safetensors `FILE` instead of seeded random ones")
		tokPath      = fs.String("tokenizer", "", "a Hugging Face tokenizer.json to use instead of the built-in one")
		seed         = fs.Int64("seed", 1, "seed for random weights, the synthetic prompt and sampling")
		topK         = fs.Int("top-k", 0, "sample from the k most likely tokens (0 or 1: greedy)")
		temperature  = fs.Float64("temperature", 1, "sampling temperature with --top-k")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*promptTokens > 0) == (*prompt != "") {
		return fmt.Errorf("%w: give exactly one of --prompt-tokens N (N > 0) and --prompt TEXT", errUsage)
	}
	if *promptTokens < 0 {
		return fmt.Errorf("%w: --prompt-tokens must be positive, got %d", errUsage, *promptTokens)
	}
	cfg, err := engine.LookupPreset(*model)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	layout, err := engine.ParseKVLayout(*kvLayout)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var dt engine.DType
	if *dtypeName != "" {
		if dt, err = engine.ParseDType(*dtypeName); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	var capBytes, limitBytes uint64
	if *capacity != "" {
		if capBytes, err = units.Parse(*capacity); err != nil {
			return fmt.Errorf("%w: --capacity: %v", errUsage, err)
		}
	}
	if *limit != "" {
		if limitBytes, err = units.Parse(*limit); err != nil {
			return fmt.Errorf("%w: --memory-limit: %v", errUsage, err)
		}
	}
	var d device.Device
	switch *dev {
	case "meta":
		d = device.NewMeta(capBytes)
	case "cpu":
		d = device.NewCPU(capBytes)
	default:
		return fmt.Errorf("%w: unknown device %q (valid: meta, cpu)", errUsage, *dev)
	}

	tok := tokenizer.Default()
	if *tokPath != "" {
		if tok, err = tokenizer.Load(*tokPath); err != nil {
			return err
		}
	}
	var ids []int
	if *prompt != "" {
		ids = tok.Encode(*prompt)
	} else {
		ids = syntheticPrompt(*promptTokens, min(cfg.Vocab, tok.VocabSize()), *seed)
	}

	// The trace file is created before any work, so an unwritable path
	// fails at once and costs nothing.
	var tw *timeline.Writer
	var sink event.Sink
	if *tracePath != "" {
		if tw, err = timeline.Create(*tracePath); err != nil {
			return err
		}
		sink = tw
	}
	em := event.NewEmitter(sink, event.EmitterOptions{})
	a := alloc.New(d, alloc.Options{Emitter: em, Limit: limitBytes})

	start := time.Now()
	res, genErr := generate(ctx, engine.Options{Config: cfg, Allocator: a, DType: dt, Seed: *seed, Weights: *weights, KVLayout: layout, Tokenizer: tok},
		engine.Request{Prompt: ids, MaxNewTokens: *maxNew, ChunkSize: *chunk, TopK: *topK, Temperature: *temperature, Seed: *seed},
		progressPrinter(stderr))
	elapsed := time.Since(start)
	events := em.Seq()

	var traceBytes int64
	if tw != nil {
		reason := ""
		if genErr != nil {
			reason = "generate failed: " + genErr.Error()
		}
		if err := tw.CloseWithReason(reason); err != nil {
			return errors.Join(genErr, err)
		}
		if st, err := os.Stat(*tracePath); err == nil {
			traceBytes = st.Size()
		}
	}
	if genErr != nil {
		if tw != nil {
			fmt.Fprintf(stderr, "trace (up to the failure) written to %s\n", *tracePath)
		}
		return genErr
	}

	printResult(stdout, cfg, d, tok, res)
	fmt.Fprintf(stdout, "time       %v (%d events, %.0f events/s)\n", elapsed.Round(time.Millisecond), events, float64(events)/elapsed.Seconds())
	if tw != nil {
		per := 0.0
		if events > 0 {
			per = float64(traceBytes) / float64(events)
		}
		fmt.Fprintf(stdout, "trace      %s (%s, %.1f bytes/event)\n", *tracePath, units.Format(uint64(traceBytes)), per)
	}
	return nil
}

// generate runs one request on a fresh engine and closes the engine, so
// that the statistics it returns are those of a complete, clean run.
func generate(ctx context.Context, opts engine.Options, req engine.Request, progress func(done, total int)) (*engine.Result, error) {
	eng, err := engine.New(opts)
	if err != nil {
		return nil, err
	}
	req.Progress = progress
	res, err := eng.Generate(ctx, req)
	return res, errors.Join(err, eng.Close())
}

// syntheticPrompt returns n seeded random token ids below vocab.
func syntheticPrompt(n, vocab int, seed int64) []int {
	r := rand.New(rand.NewPCG(uint64(seed), 0x6c696e676572))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = r.IntN(vocab)
	}
	return ids
}

// progressPrinter shows prefill progress on stderr: one line updated in
// place on a terminal, a line per tenth otherwise.
func progressPrinter(w io.Writer) func(done, total int) {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	last := -1
	return func(done, total int) {
		if total <= 1 {
			return
		}
		if tty {
			fmt.Fprintf(w, "\rprefill %d/%d chunks", done, total)
			if done == total {
				fmt.Fprintln(w)
			}
			return
		}
		if tenth := done * 10 / total; tenth != last {
			last = tenth
			fmt.Fprintf(w, "prefill %d/%d chunks\n", done, total)
		}
	}
}

func printResult(w io.Writer, cfg engine.Config, d device.Device, tok *tokenizer.Tokenizer, res *engine.Result) {
	fmt.Fprintf(w, "model      %s on %s: %d layers, hidden %d\n", cfg.Name, d.Name(), cfg.Layers, cfg.Hidden)
	fmt.Fprintf(w, "prompt     %d tokens in %d chunks (%.0f tokens/s)\n", res.PromptTokens, res.Chunks, res.PrefillTokensPerSecond)
	stop := "max tokens"
	if res.StoppedAtEOS {
		stop = "end of sequence"
	}
	fmt.Fprintf(w, "generated  %d tokens, stopped at %s (%.1f tokens/s)\n", len(res.Tokens), stop, res.TokensPerSecond)
	if d.HasData() {
		fmt.Fprintf(w, "text       %q\n", tok.Decode(res.Tokens))
	}
	st := res.Stats
	fmt.Fprintf(w, "memory     peak allocated %s, peak reserved %s; at the end allocated %s, reserved %s\n",
		units.Format(st.PeakAllocated), units.Format(st.PeakReserved), units.Format(st.Allocated), units.Format(st.Reserved))
	type row struct {
		cat  event.Category
		peak uint64
	}
	var rows []row
	for c := event.Category(1); c < event.NumCategories; c++ {
		if p := st.PeakByCategory[c]; p > 0 {
			rows = append(rows, row{c, p})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.peak, a.peak) })
	for _, r := range rows {
		fmt.Fprintf(w, "  %-16s peak %s\n", r.cat, units.Format(r.peak))
	}
}
