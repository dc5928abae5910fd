package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"linger/engine"
	"linger/engine/alloc"
	"linger/engine/device"
	"linger/engine/tokenizer"
	"linger/internal/units"
	"linger/timeline"
	"linger/timeline/event"
)

// A Device is a device generate offers (--device NAME). New makes it; a
// capacity other than 0 is --capacity.
type Device struct {
	Name string
	Help string // what it is, for the flag's help: "accounting only"
	New  func(capacity uint64) (device.Device, error)
}

// DefaultDevices are meta (the default) and cpu.
var DefaultDevices = []Device{
	{Name: "meta", Help: "accounting only", New: func(c uint64) (device.Device, error) { return device.NewMeta(c), nil }},
	{Name: "cpu", Help: "real compute", New: func(c uint64) (device.Device, error) { return device.NewCPU(c), nil }},
}

// Generate is the generate command of prog: it runs one request through
// a fresh engine on one of devices (the first is the default), prints
// what it produced and used, and writes its trace when asked.
func Generate(ctx context.Context, prog string, args []string, devices []Device, stdout, stderr io.Writer) error {
	f, err := parseGenerateFlags(prog, args, devices, stderr)
	if err != nil {
		return err
	}
	opts, err := f.engineOptions()
	if err != nil {
		return err
	}
	d, limit, err := f.memory(devices)
	if err != nil {
		return err
	}
	if m, ok := d.(*device.Meta); ok && f.capacity == "" {
		// As in a kernel: meta's default fits the model asked for.
		dt := opts.DType
		if dt == 0 {
			dt = engine.BF16
		}
		if err := m.SetCapacity(engine.MetaCapacity(opts.Config, dt)); err != nil {
			return err
		}
	}
	tok, ids, err := f.tokens(opts.Config.Vocab)
	if err != nil {
		return err
	}
	opts.Tokenizer = tok

	// The trace file is created before any work, so an unwritable path
	// fails at once and costs nothing.
	var tw *timeline.Writer
	var sink event.Sink
	if f.trace != "" {
		if tw, err = timeline.Create(f.trace); err != nil {
			return err
		}
		sink = tw
	}
	em := event.NewEmitter(sink, event.EmitterOptions{})
	used := &deviceUsed{dev: d, em: em}
	opts.Allocator = alloc.New(d, alloc.Options{Emitter: em, Limit: limit, OnSegments: used.sample})

	start := time.Now()
	res, genErr := generate(ctx, opts, f.request(ids), progressPrinter(stderr))
	elapsed := time.Since(start)
	events := em.Seq()
	peakUsed := used.peakBytes()

	var traceBytes int64
	if tw != nil {
		if traceBytes, err = closeTrace(tw, f.trace, genErr); err != nil {
			return errors.Join(genErr, err)
		}
	}
	if genErr != nil {
		if tw != nil {
			fmt.Fprintf(stderr, "trace (up to the failure) written to %s\n", f.trace)
		}
		return genErr
	}
	if f.json {
		return printJSON(stdout, opts.Config, d, res, peakUsed, elapsed, events, f.trace, traceBytes)
	}
	printResult(stdout, opts.Config, d, tok, res)
	fmt.Fprintf(stdout, "device     peak used %s (the device's own view)\n", units.Format(peakUsed))
	printThroughput(stdout, elapsed, events, f.trace, traceBytes)
	return nil
}

// deviceUsed samples the device's own view of its used memory (MemInfo
// total minus free: on a GPU, the CUDA context and every other process on
// the card too) after every allocator call that took or returned a segment
// (alloc.Options.OnSegments), keeps its peak, and emits it as the
// "device_used" counter when it changed, as the kernel process does.
type deviceUsed struct {
	dev device.Device
	em  *event.Emitter

	mu   sync.Mutex
	last uint64
	sent bool
	peak uint64
}

func (u *deviceUsed) sample() {
	free, total := u.dev.MemInfo()
	used := total - free
	u.mu.Lock()
	defer u.mu.Unlock()
	u.peak = max(u.peak, used)
	if u.sent && used == u.last {
		return
	}
	u.last, u.sent = used, true
	u.em.Counter(event.CounterDeviceUsed, used)
}

func (u *deviceUsed) peakBytes() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.peak
}

// Shape is a dense model's shape in Summary, as a config.json names it,
// for tools that build the same model elsewhere (scripts/gpu-check.sh
// builds it in PyTorch).
type Shape struct {
	Layers    int     `json:"layers"`
	Hidden    int     `json:"hidden"`
	Heads     int     `json:"heads"`
	KVHeads   int     `json:"kv_heads"`
	HeadDim   int     `json:"head_dim"`
	FFN       int     `json:"ffn"`
	Vocab     int     `json:"vocab"`
	RopeTheta float64 `json:"rope_theta"`
	NormEps   float64 `json:"norm_eps"`
	Tied      bool    `json:"tied_embeddings"`
}

// Summary is generate's --json output: one JSON object on stdout.
type Summary struct {
	Model           string            `json:"model"`
	Shape           Shape             `json:"shape"`
	Device          string            `json:"device"`
	PromptTokens    int               `json:"prompt_tokens"`
	Chunks          int               `json:"chunks"`
	GeneratedTokens int               `json:"generated_tokens"`
	PeakAllocated   uint64            `json:"peak_allocated"`
	PeakReserved    uint64            `json:"peak_reserved"`
	Allocated       uint64            `json:"allocated"` // at the end
	Reserved        uint64            `json:"reserved"`  // at the end
	PeakDeviceUsed  uint64            `json:"peak_device_used"`
	PeakByCategory  map[string]uint64 `json:"peak_by_category"`
	ElapsedNS       int64             `json:"elapsed_ns"` // the request, engine start to close; not the trace's close
	// The engine's own timing: the prefill (to the first token) and the
	// decode steps after it, and their rates.
	PrefillNS              int64   `json:"prefill_ns"`
	DecodeNS               int64   `json:"decode_ns"`
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second"`
	DecodeTokensPerSecond  float64 `json:"decode_tokens_per_second"`
	// The same spans on the device's own clock (CUDA events); 0 on meta
	// and cpu.
	PrefillDeviceNS int64  `json:"prefill_device_ns"`
	DecodeDeviceNS  int64  `json:"decode_device_ns"`
	Events          uint64 `json:"events"` // recorded: 0 without --trace
	Trace           string `json:"trace,omitempty"`
	TraceBytes      int64  `json:"trace_bytes,omitempty"`
}

// printJSON writes the run's Summary as one line.
func printJSON(w io.Writer, cfg engine.Config, d device.Device, res *engine.Result, peakUsed uint64, elapsed time.Duration, events uint64, trace string, traceBytes int64) error {
	st := res.Stats
	s := Summary{
		Model: cfg.Name, Device: d.Name(),
		Shape: Shape{Layers: cfg.Layers, Hidden: cfg.Hidden, Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim,
			FFN: cfg.FFN, Vocab: cfg.Vocab, RopeTheta: cfg.RopeTheta, NormEps: cfg.NormEps, Tied: cfg.TiedEmbeddings},
		PromptTokens: res.PromptTokens, Chunks: res.Chunks, GeneratedTokens: len(res.Tokens),
		PeakAllocated: st.PeakAllocated, PeakReserved: st.PeakReserved, Allocated: st.Allocated, Reserved: st.Reserved,
		PeakDeviceUsed: peakUsed, PeakByCategory: map[string]uint64{},
		ElapsedNS: elapsed.Nanoseconds(), Events: events, Trace: trace, TraceBytes: traceBytes,
		PrefillNS: res.PrefillTime.Nanoseconds(), DecodeNS: res.DecodeTime.Nanoseconds(),
		PrefillTokensPerSecond: res.PrefillTokensPerSecond, DecodeTokensPerSecond: res.TokensPerSecond,
		PrefillDeviceNS: res.PrefillDeviceTime.Nanoseconds(), DecodeDeviceNS: res.DecodeDeviceTime.Nanoseconds(),
	}
	for c := event.Category(1); c < event.NumCategories; c++ {
		if p := st.PeakByCategory[c]; p > 0 {
			s.PeakByCategory[c.String()] = p
		}
	}
	line, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// generateFlags are generate's command line.
type generateFlags struct {
	model, device, dtype, kv, weights string
	capacity, limit                   string // sizes, "" for the default
	prompt, tokenizer                 string
	promptTokens, maxNew, chunk, topK int
	seed                              int64
	temperature                       float64
	trace                             string // "" for none
	json                              bool
}

// parseGenerateFlags reads generate's command line and checks that it
// gives exactly one prompt.
func parseGenerateFlags(prog string, args []string, devices []Device, stderr io.Writer) (*generateFlags, error) {
	var f generateFlags
	fs := NewFlagSet(prog, "generate", stderr)
	fs.StringVar(&f.model, "model", "tiny", "model preset: "+strings.Join(engine.PresetNames(), ", "))
	fs.StringVar(&f.device, "device", devices[0].Name, "device: "+deviceHelp(devices))
	fs.IntVar(&f.promptTokens, "prompt-tokens", 0, "a synthetic prompt of `N` tokens (seeded random ids)")
	fs.StringVar(&f.prompt, "prompt", "", "prompt `text`, tokenized with the built-in tokenizer or --tokenizer")
	fs.IntVar(&f.maxNew, "max-new-tokens", 16, "tokens to generate at most")
	fs.IntVar(&f.chunk, "chunk-size", 2048, "prefill chunk length in tokens")
	fs.StringVar(&f.trace, "trace", "", "write the trace log to `FILE` (.ltrace)")
	fs.BoolVar(&f.json, "json", false, "print a JSON summary (peaks, device used, time, events, trace size) on stdout instead of the text")
	fs.StringVar(&f.dtype, "dtype", "", "element type: f32, bf16, f16 (default bf16 on meta, f32 on cpu)")
	fs.StringVar(&f.capacity, "capacity", "", "device capacity, e.g. 80GiB (default: on meta 80GiB, or what the model needs when more, as engine.MetaCapacity says: 1280GiB for deepseek-v3; on cpu the machine's memory)")
	fs.StringVar(&f.limit, "memory-limit", "", "allocator limit, simulating a smaller card, e.g. 16GiB")
	fs.StringVar(&f.kv, "kv", "contiguous", "KV cache layout: contiguous or paged (16-token blocks)")
	fs.StringVar(&f.weights, "weights", "", "load weights from a safetensors `FILE` instead of seeded random ones")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "a Hugging Face tokenizer.json to use instead of the built-in one")
	fs.Int64Var(&f.seed, "seed", 1, "seed for random weights, the synthetic prompt and sampling")
	fs.IntVar(&f.topK, "top-k", 0, "sample from the k most likely tokens (0 or 1: greedy)")
	fs.Float64Var(&f.temperature, "temperature", 1, "sampling temperature with --top-k")
	if err := ParseFlags(fs, args); err != nil {
		return nil, err
	}
	if (f.promptTokens > 0) == (f.prompt != "") {
		return nil, fmt.Errorf("%w: give exactly one of --prompt-tokens N (N > 0) and --prompt TEXT", ErrUsage)
	}
	if f.promptTokens < 0 {
		return nil, fmt.Errorf("%w: --prompt-tokens must be positive, got %d", ErrUsage, f.promptTokens)
	}
	return &f, nil
}

// engineOptions resolves the model, KV cache layout and element type; the
// caller adds the allocator and the tokenizer.
func (f *generateFlags) engineOptions() (engine.Options, error) {
	cfg, err := engine.LookupPreset(f.model)
	if err != nil {
		return engine.Options{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	layout, err := engine.ParseKVLayout(f.kv)
	if err != nil {
		return engine.Options{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	var dt engine.DType
	if f.dtype != "" {
		if dt, err = engine.ParseDType(f.dtype); err != nil {
			return engine.Options{}, fmt.Errorf("%w: %v", ErrUsage, err)
		}
	}
	return engine.Options{Config: cfg, DType: dt, Seed: f.seed, Weights: f.weights, KVLayout: layout}, nil
}

// deviceHelp lists the devices for --device's help: "meta (accounting
// only) or cpu (real compute)".
func deviceHelp(devices []Device) string {
	var b strings.Builder
	for i, d := range devices {
		switch {
		case i == 0:
		case i == len(devices)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", d.Name, d.Help)
	}
	return b.String()
}

// memory resolves the device, with its capacity, and the allocator's limit
// (0 for none).
func (f *generateFlags) memory(devices []Device) (device.Device, uint64, error) {
	capacity, err := parseSizeFlag("capacity", f.capacity)
	if err != nil {
		return nil, 0, err
	}
	limit, err := parseSizeFlag("memory-limit", f.limit)
	if err != nil {
		return nil, 0, err
	}
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.Name
		if d.Name == f.device {
			dev, err := d.New(capacity)
			if err != nil {
				return nil, 0, err
			}
			return dev, limit, nil
		}
	}
	if f.device == "cuda" {
		return nil, 0, fmt.Errorf("%w: device \"cuda\" needs the CUDA build: run linger-cuda generate (built with make cuda); this binary has %s", ErrUsage, strings.Join(names, ", "))
	}
	return nil, 0, fmt.Errorf("%w: unknown device %q (valid: %s)", ErrUsage, f.device, strings.Join(names, ", "))
}

// parseSizeFlag reads the size given to --name; "" is 0, the default.
func parseSizeFlag(name, s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := units.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("%w: --%s: %v", ErrUsage, name, err)
	}
	return n, nil
}

// tokens loads the tokenizer and returns the prompt's token ids: the text
// encoded, or synthetic ids below both the model's and the tokenizer's
// vocabulary.
func (f *generateFlags) tokens(vocab int) (*tokenizer.Tokenizer, []int, error) {
	tok := tokenizer.Default()
	if f.tokenizer != "" {
		var err error
		if tok, err = tokenizer.Load(f.tokenizer); err != nil {
			return nil, nil, err
		}
	}
	if f.prompt != "" {
		return tok, tok.Encode(f.prompt), nil
	}
	return tok, syntheticPrompt(f.promptTokens, min(vocab, tok.VocabSize()), f.seed), nil
}

// request is the engine request for the prompt ids.
func (f *generateFlags) request(ids []int) engine.Request {
	return engine.Request{Prompt: ids, MaxNewTokens: f.maxNew, ChunkSize: f.chunk, TopK: f.topK, Temperature: f.temperature, Seed: f.seed}
}

// closeTrace ends the trace at path, saying why when the run failed, and
// returns the file's size (0 when unknown).
func closeTrace(tw *timeline.Writer, path string, genErr error) (int64, error) {
	reason := ""
	if genErr != nil {
		reason = "generate failed: " + genErr.Error()
	}
	if err := tw.CloseWithReason(reason); err != nil {
		return 0, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return 0, nil
	}
	return st.Size(), nil
}

// printThroughput writes how long the run took, how many events it
// recorded and, with a trace, how large the trace is per event.
func printThroughput(w io.Writer, elapsed time.Duration, events uint64, trace string, traceBytes int64) {
	fmt.Fprintf(w, "time       %v (%d events, %.0f events/s)\n", elapsed.Round(time.Millisecond), events, float64(events)/elapsed.Seconds())
	if trace == "" {
		return
	}
	per := 0.0
	if events > 0 {
		per = float64(traceBytes) / float64(events)
	}
	fmt.Fprintf(w, "trace      %s (%s, %.1f bytes/event)\n", trace, units.Format(uint64(traceBytes)), per)
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
