package engine

import (
	"fmt"
	"sort"
	"strings"

	"linger/engine/device"
)

// DType is the element type of a tensor. Real data exists only for F32 on
// cpu; every dtype can be accounted for on meta.
type DType uint8

// Element types.
const (
	F32  DType = 1
	BF16 DType = 2
	F16  DType = 3
)

// Size returns the bytes of one element (0 for an unknown dtype).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// String returns the dtype's name: "f32", "bf16" or "f16".
func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// ParseDType returns the dtype named s ("f32", "bf16", "f16"; also the
// safetensors spellings "F32", "BF16", "F16").
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(s) {
	case "f32", "float32":
		return F32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "f16", "float16":
		return F16, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (valid: f32, bf16, f16)", s)
}

// Config is a model shape. The zero values of the MLA and MoE fields mean
// plain multi-head (grouped-query) attention and a dense FFN.
type Config struct {
	Name       string
	Layers     int
	Hidden     int
	Heads      int
	KVHeads    int // grouped-query attention: Heads is a multiple of KVHeads
	HeadDim    int
	FFN        int // intermediate size of the dense FFN
	Vocab      int
	MaxContext int
	RopeTheta  float64
	NormEps    float64
	// TiedEmbeddings: the LM head reuses the embedding matrix.
	TiedEmbeddings bool

	// Multi-head latent attention (DeepSeek): the cache holds a compressed
	// latent of KVLoraRank plus QKRopeHeadDim values per token and layer.
	QLoraRank     int
	KVLoraRank    int
	QKNopeHeadDim int
	QKRopeHeadDim int
	VHeadDim      int

	// Mixture of experts: layers from DenseLayers on route each token to
	// ActiveExperts of Experts experts, plus SharedExperts always-on ones.
	Experts       int
	ActiveExperts int
	SharedExperts int
	ExpertFFN     int
	DenseLayers   int
}

// MLA reports whether the model uses multi-head latent attention.
func (c Config) MLA() bool { return c.KVLoraRank > 0 }

// MoE reports whether the model has routed experts.
func (c Config) MoE() bool { return c.Experts > 0 }

// IsMoELayer reports whether layer l routes to experts.
func (c Config) IsMoELayer(l int) bool { return c.MoE() && l >= c.DenseLayers }

// KVValuesPerToken is how many values one token occupies in one layer's
// cache: keys and values of every KV head, or the MLA latent plus rope key.
func (c Config) KVValuesPerToken() int {
	if c.MLA() {
		return c.KVLoraRank + c.QKRopeHeadDim
	}
	return 2 * c.KVHeads * c.HeadDim
}

// KVBytesPerToken is the cache bytes of one token over all layers, before
// any allocator rounding.
func (c Config) KVBytesPerToken(dt DType) uint64 {
	return uint64(c.Layers) * uint64(c.KVValuesPerToken()) * uint64(dt.Size())
}

// MoELayers is how many layers route to experts.
func (c Config) MoELayers() int {
	if !c.MoE() {
		return 0
	}
	return c.Layers - c.DenseLayers
}

// WeightBytes is the bytes of the model's parameters in dt, before any
// allocator rounding: what Engine.WeightBytes reports once loaded.
func (c Config) WeightBytes(dt DType) uint64 {
	var n uint64
	for _, s := range weightSpecs(c, &weights{}) {
		p := uint64(1)
		for _, d := range s.shape {
			p *= uint64(d)
		}
		n += p
	}
	return n * uint64(dt.Size())
}

// MetaTokens is the prompt length MetaCapacity makes room for: the field
// report's 128K-token stress input.
const MetaTokens = 131072

// MetaCapacity is a meta device's capacity that fits a model of shape c
// in dt: device.DefaultMetaCapacity (80 GiB, an A100/H100-sized card)
// when the model's weights and a KV cache of MetaTokens tokens fit in
// it with 16 GiB to spare, else those plus 16 GiB, rounded up to a
// multiple of 16 GiB (DeepSeek-V3 in bf16: 1,280 GiB). Meta memory is
// only accounting, so the figure costs nothing; it keeps a notebook's
// engine(model="deepseek-v3", device="meta") from failing at its first
// weight, while every model that fits a real card keeps the card's size.
func MetaCapacity(c Config, dt DType) uint64 {
	const spare, unit = 16 << 30, 16 << 30
	need := c.WeightBytes(dt) + MetaTokens*c.KVBytesPerToken(dt) + spare
	if need <= device.DefaultMetaCapacity {
		return device.DefaultMetaCapacity
	}
	return (need + unit - 1) / unit * unit
}

// Validate reports the first field that is missing or out of range.
func (c Config) Validate() error {
	pos := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("config %q: %s must be positive, got %d", c.Name, name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Layers", c.Layers}, {"Hidden", c.Hidden}, {"Heads", c.Heads}, {"FFN", c.FFN}, {"Vocab", c.Vocab}, {"MaxContext", c.MaxContext}} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if c.MLA() {
		for _, f := range []struct {
			name string
			v    int
		}{{"QLoraRank", c.QLoraRank}, {"QKNopeHeadDim", c.QKNopeHeadDim}, {"QKRopeHeadDim", c.QKRopeHeadDim}, {"VHeadDim", c.VHeadDim}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if c.QKRopeHeadDim%2 != 0 {
			return fmt.Errorf("config %q: QKRopeHeadDim must be even, got %d", c.Name, c.QKRopeHeadDim)
		}
	} else {
		if err := pos("KVHeads", c.KVHeads); err != nil {
			return err
		}
		if err := pos("HeadDim", c.HeadDim); err != nil {
			return err
		}
		if c.Heads%c.KVHeads != 0 {
			return fmt.Errorf("config %q: Heads (%d) must be a multiple of KVHeads (%d)", c.Name, c.Heads, c.KVHeads)
		}
		if c.HeadDim%2 != 0 {
			return fmt.Errorf("config %q: HeadDim must be even for rotary embeddings, got %d", c.Name, c.HeadDim)
		}
	}
	if c.MoE() {
		for _, f := range []struct {
			name string
			v    int
		}{{"ActiveExperts", c.ActiveExperts}, {"ExpertFFN", c.ExpertFFN}} {
			if err := pos(f.name, f.v); err != nil {
				return err
			}
		}
		if c.ActiveExperts > c.Experts {
			return fmt.Errorf("config %q: ActiveExperts (%d) exceeds Experts (%d)", c.Name, c.ActiveExperts, c.Experts)
		}
		if c.SharedExperts < 0 || c.DenseLayers < 0 || c.DenseLayers > c.Layers {
			return fmt.Errorf("config %q: SharedExperts (%d) or DenseLayers (%d) out of range", c.Name, c.SharedExperts, c.DenseLayers)
		}
	}
	if c.RopeTheta <= 0 {
		return fmt.Errorf("config %q: RopeTheta must be positive, got %g", c.Name, c.RopeTheta)
	}
	if c.NormEps <= 0 {
		return fmt.Errorf("config %q: NormEps must be positive, got %g", c.Name, c.NormEps)
	}
	return nil
}

// Presets are the built-in model shapes by name. The map is read-only:
// callers must not modify it (LookupPreset returns a copy).
var Presets = map[string]Config{
	"tiny": {
		Name: "tiny", Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 128,
		Vocab: 4096, MaxContext: 4096, RopeTheta: 10000, NormEps: 1e-6,
	},
	"small": {
		Name: "small", Layers: 4, Hidden: 256, Heads: 8, KVHeads: 4, HeadDim: 32, FFN: 704,
		Vocab: 4096, MaxContext: 8192, RopeTheta: 10000, NormEps: 1e-6,
	},
	"qwen2-1.5b": {
		Name: "qwen2-1.5b", Layers: 28, Hidden: 1536, Heads: 12, KVHeads: 2, HeadDim: 128, FFN: 8960,
		Vocab: 151936, MaxContext: 131072, RopeTheta: 1e6, NormEps: 1e-6, TiedEmbeddings: true,
	},
	"llama3-8b": {
		Name: "llama3-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, HeadDim: 128, FFN: 14336,
		Vocab: 128256, MaxContext: 131072, RopeTheta: 500000, NormEps: 1e-5,
	},
	// small-moe is DeepSeek-V3's architecture at a size cpu computes in
	// milliseconds: MLA with a 32-value latent, a dense first layer, then
	// 8 routed experts (2 active per token) and 1 shared expert per layer.
	"small-moe": {
		Name: "small-moe", Layers: 4, Hidden: 128, Heads: 4, FFN: 256,
		Vocab: 4096, MaxContext: 4096, RopeTheta: 10000, NormEps: 1e-6,
		QLoraRank: 64, KVLoraRank: 32, QKNopeHeadDim: 16, QKRopeHeadDim: 8, VHeadDim: 16,
		Experts: 8, ActiveExperts: 2, SharedExperts: 1, ExpertFFN: 64, DenseLayers: 1,
	},
	"deepseek-v3": {
		Name: "deepseek-v3", Layers: 61, Hidden: 7168, Heads: 128, FFN: 18432,
		Vocab: 129280, MaxContext: 163840, RopeTheta: 10000, NormEps: 1e-6,
		QLoraRank: 1536, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
		Experts: 256, ActiveExperts: 8, SharedExperts: 1, ExpertFFN: 2048, DenseLayers: 3,
	},
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupPreset returns the preset called name. An unknown name is an error
// that lists the valid ones.
func LookupPreset(name string) (Config, error) {
	c, ok := Presets[name]
	if !ok {
		return Config{}, fmt.Errorf("unknown model preset %q (valid: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return c, nil
}
