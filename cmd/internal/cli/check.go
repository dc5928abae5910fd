package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"linger/engine"
	"linger/engine/device"
)

// Tolerances of check. bf16 keeps 8 significant bits, so one rounding is
// off by up to 2^-9 ≈ 0.2% of the value; a forward pass rounds every
// activation once per kernel, about ten times per layer, and the errors of
// a random-weight model add up roughly as a random walk across layers and
// then through the lm head's dot products. A few percent of the logits'
// scale is what bf16 inference gives (PyTorch's bf16 against its f32 shows
// the same order); an indexing, masking or caching bug is off by the
// logits' whole scale. Errors are measured against the logits' scale
// (max |logit| of the reference), not elementwise, because a logit near 0
// has no meaningful relative error.
const (
	// checkLogitsTol bounds max|device − cpu| / max|cpu| over a logits row.
	checkLogitsTol = 0.05
	// checkRecomputeTol bounds the same between the device's decode with
	// its KV cache and its recomputation of the whole sequence: the same
	// kernels, grouped differently, so a tighter bound.
	checkRecomputeTol = 0.03
)

// CheckResult is one model's numbers from check.
type CheckResult struct {
	Model  string `json:"model"`
	Device string `json:"device"`
	DType  string `json:"dtype"`
	// Prompt tokens, in chunks of Chunk, then Decode greedy steps.
	Prompt int `json:"prompt_tokens"`
	Chunk  int `json:"chunk"`
	Decode int `json:"decode_steps"`
	// LogitsErr is the largest max|device − cpu| / max|cpu| over every
	// compared row (each chunk's last token, each decode step), the
	// device fed the same tokens as the cpu.
	LogitsErr float64 `json:"logits_err"`
	// Top1 counts the rows whose largest logit is the same token on both.
	Top1, Rows int    `json:"-"`
	Top1Agree  string `json:"top1_agree"`
	// RecomputeErr compares each decode step's logits (KV cache) with a
	// forward pass of the whole sequence from scratch on the device;
	// RecomputeSame counts the steps whose greedy token is the same.
	RecomputeErr  float64 `json:"recompute_err"`
	RecomputeSame string  `json:"recompute_same_token"`
	Pass          bool    `json:"pass"`
	Why           string  `json:"why,omitempty"`
}

// Check is the check command of prog: it runs small models with the same
// seeded weights on a device and on the cpu device (float32, the
// reference) and compares their logits, then compares the device's
// decode with its KV cache against recomputing the whole sequence. It
// prints a table, or one JSON line per model, and fails when a model is
// off by more than bf16 explains.
func Check(ctx context.Context, prog string, args []string, devices []Device, stdout, stderr io.Writer) error {
	fs := NewFlagSet(prog, "check", stderr)
	dev := fs.String("device", devices[len(devices)-1].Name, "device to check against the cpu device: "+deviceHelp(devices))
	models := fs.String("models", "tiny,small", "comma-separated model presets")
	prompt := fs.Int("prompt-tokens", 48, "prompt tokens")
	chunk := fs.Int("chunk-size", 16, "prefill chunk")
	decode := fs.Int("decode", 8, "greedy decode steps")
	seed := fs.Int64("seed", 1, "seed of the weights and the prompt")
	kv := fs.String("kv-layout", "contiguous", "KV cache layout: contiguous or paged")
	asJSON := fs.Bool("json", false, "print one JSON line per model")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s check [flags]\n\nCompares a device's logits with the cpu device's (float32) on small models with the same weights, and its cached decode with recomputation.\n\n", prog)
		fs.PrintDefaults()
	}
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if *prompt < 1 || *chunk < 1 || *decode < 1 {
		return fmt.Errorf("%w: --prompt-tokens, --chunk-size and --decode must be positive", ErrUsage)
	}
	layout, err := engine.ParseKVLayout(*kv)
	if err != nil {
		return fmt.Errorf("%w: --kv-layout: %v", ErrUsage, err)
	}
	i := slices.IndexFunc(devices, func(d Device) bool { return d.Name == *dev })
	if i < 0 {
		return fmt.Errorf("%w: --device %q: want %s", ErrUsage, *dev, deviceHelp(devices))
	}
	var results []CheckResult
	for _, m := range strings.Split(*models, ",") {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := devices[i].New(0)
		if err != nil {
			return err
		}
		r, err := checkModel(strings.TrimSpace(m), d, checkSpec{prompt: *prompt, chunk: *chunk, decode: *decode, seed: *seed, layout: layout})
		if c, ok := d.(interface{ Close() error }); ok {
			err = errors.Join(err, c.Close())
		}
		if err != nil {
			return fmt.Errorf("check %s on %s: %w", m, *dev, err)
		}
		results = append(results, *r)
		if *asJSON {
			line, _ := json.Marshal(r)
			fmt.Fprintf(stdout, "%s\n", line)
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "%-8s %-6s %-5s %-22s %-10s %-22s %-10s %s\n", "model", "device", "dtype", "logits err (tol)", "top-1", "recompute err (tol)", "same tok", "result")
		for _, r := range results {
			verdict := "PASS"
			if !r.Pass {
				verdict = "FAIL: " + r.Why
			}
			fmt.Fprintf(stdout, "%-8s %-6s %-5s %-22s %-10s %-22s %-10s %s\n", r.Model, r.Device, r.DType,
				fmt.Sprintf("%.4f (%.2f)", r.LogitsErr, checkLogitsTol), r.Top1Agree,
				fmt.Sprintf("%.4f (%.2f)", r.RecomputeErr, checkRecomputeTol), r.RecomputeSame, verdict)
		}
	}
	for _, r := range results {
		if !r.Pass {
			return fmt.Errorf("%s on %s: %s", r.Model, r.Device, r.Why)
		}
	}
	return nil
}

type checkSpec struct {
	prompt, chunk, decode int
	seed                  int64
	layout                engine.KVLayout
}

// checkRun is one engine with its cache, fed token by token.
type checkRun struct {
	e     *engine.Engine
	cache engine.KVCache
}

func newCheckRun(model string, d device.Device, s checkSpec, maxTokens int) (*checkRun, error) {
	e, err := engine.New(engine.Options{Model: model, Device: d, Seed: s.seed, KVLayout: s.layout})
	if err != nil {
		return nil, err
	}
	c, err := e.NewKVCache(maxTokens)
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return &checkRun{e: e, cache: c}, nil
}

// forward runs tokens after the cache and returns the last token's logits
// on the host.
func (r *checkRun) forward(tokens []int) ([]float32, error) {
	return forwardHost(r.e, tokens, r.cache)
}

func (r *checkRun) close() error {
	return errors.Join(r.cache.Free(), r.e.Close())
}

func forwardHost(e *engine.Engine, tokens []int, cache engine.KVCache) ([]float32, error) {
	t, err := e.Forward(tokens, cache, nil)
	if err != nil {
		return nil, err
	}
	v, err := t.ToHost()
	return v, errors.Join(err, t.Free())
}

func checkModel(model string, d device.Device, s checkSpec) (*CheckResult, error) {
	cfg, err := engine.LookupPreset(model)
	if err != nil {
		return nil, err
	}
	total := s.prompt + s.decode
	ref, err := newCheckRun(model, device.NewCPU(0), s, total)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	defer ref.close()
	dev, err := newCheckRun(model, d, s, total)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name(), err)
	}
	defer dev.close()
	r := &CheckResult{Model: model, Device: d.Name(), DType: dev.e.DType().String(), Prompt: s.prompt, Chunk: s.chunk, Decode: s.decode}
	compare := func(a, b []float32) {
		r.LogitsErr = max(r.LogitsErr, scaledErr(a, b))
		r.Rows++
		if argmaxF(a) == argmaxF(b) {
			r.Top1++
		}
	}

	seq := syntheticPrompt(s.prompt, cfg.Vocab, s.seed)
	var last []float32
	for lo := 0; lo < s.prompt; lo += s.chunk {
		hi := min(lo+s.chunk, s.prompt)
		a, err := dev.forward(seq[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("%s prefill [%d,%d): %w", d.Name(), lo, hi, err)
		}
		b, err := ref.forward(seq[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("cpu prefill [%d,%d): %w", lo, hi, err)
		}
		compare(a, b)
		last = a
	}
	// Greedy decode, the device choosing; the cpu follows its tokens so
	// that one flipped near-tie does not end the comparison.
	cached := make([][]float32, 0, s.decode)
	for i := 0; i < s.decode; i++ {
		tok := argmaxF(last)
		seq = append(seq, tok)
		a, err := dev.forward([]int{tok})
		if err != nil {
			return nil, fmt.Errorf("%s decode step %d: %w", d.Name(), i, err)
		}
		b, err := ref.forward([]int{tok})
		if err != nil {
			return nil, fmt.Errorf("cpu decode step %d: %w", i, err)
		}
		compare(a, b)
		cached = append(cached, a)
		last = a
	}
	// Recompute: the whole sequence up to each decode step in one pass
	// from an empty cache, on the device.
	same := 0
	for i, want := range cached {
		n := s.prompt + i + 1
		c, err := dev.e.NewKVCache(n)
		if err != nil {
			return nil, err
		}
		got, err := forwardHost(dev.e, seq[:n], c)
		err = errors.Join(err, c.Free())
		if err != nil {
			return nil, fmt.Errorf("%s recompute of %d tokens: %w", d.Name(), n, err)
		}
		r.RecomputeErr = max(r.RecomputeErr, scaledErr(want, got))
		if argmaxF(want) == argmaxF(got) {
			same++
		}
	}
	r.Top1Agree = fmt.Sprintf("%d/%d", r.Top1, r.Rows)
	r.RecomputeSame = fmt.Sprintf("%d/%d", same, len(cached))
	var why []string
	if !(r.LogitsErr <= checkLogitsTol) {
		why = append(why, fmt.Sprintf("logits off by %.4f of their scale (tolerance %.2f)", r.LogitsErr, checkLogitsTol))
	}
	if !(r.RecomputeErr <= checkRecomputeTol) {
		why = append(why, fmt.Sprintf("cached decode off from recomputation by %.4f (tolerance %.2f)", r.RecomputeErr, checkRecomputeTol))
	}
	r.Why = strings.Join(why, "; ")
	r.Pass = len(why) == 0
	return r, nil
}

// scaledErr is max|a − b| / max|b|; NaN anywhere makes it +Inf.
func scaledErr(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var diff, scale float64
	for i := range b {
		x, y := float64(a[i]), float64(b[i])
		if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
			return math.Inf(1)
		}
		diff = max(diff, math.Abs(x-y))
		scale = max(scale, math.Abs(y))
	}
	if scale == 0 {
		if diff == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return diff / scale
}

// argmaxF is the index of the largest value, the first on ties.
func argmaxF(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
