package engine

import (
	"strings"
	"testing"
)

func TestPresetsValid(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			c, err := LookupPreset(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.Name != name {
				t.Errorf("Name = %q", c.Name)
			}
		})
	}
}

func TestLookupPresetUnknown(t *testing.T) {
	_, err := LookupPreset("gpt-5")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`"gpt-5"`, "tiny", "qwen2-1.5b", "deepseek-v3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tiny := Presets["tiny"]
	ds := Presets["deepseek-v3"]
	for _, tc := range []struct {
		name  string
		edit  func(c *Config)
		field string
	}{
		{"layers", func(c *Config) { c.Layers = 0 }, "Layers"},
		{"hidden", func(c *Config) { c.Hidden = -1 }, "Hidden"},
		{"heads", func(c *Config) { c.Heads = 0 }, "Heads"},
		{"kvheads", func(c *Config) { c.KVHeads = 0 }, "KVHeads"},
		{"grouping", func(c *Config) { c.KVHeads = 3 }, "multiple of KVHeads"},
		{"headdim odd", func(c *Config) { c.HeadDim = 15 }, "HeadDim"},
		{"ffn", func(c *Config) { c.FFN = 0 }, "FFN"},
		{"vocab", func(c *Config) { c.Vocab = 0 }, "Vocab"},
		{"context", func(c *Config) { c.MaxContext = 0 }, "MaxContext"},
		{"theta", func(c *Config) { c.RopeTheta = 0 }, "RopeTheta"},
		{"eps", func(c *Config) { c.NormEps = 0 }, "NormEps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tiny
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		edit  func(c *Config)
		field string
	}{
		{"qlora", func(c *Config) { c.QLoraRank = 0 }, "QLoraRank"},
		{"vhead", func(c *Config) { c.VHeadDim = 0 }, "VHeadDim"},
		{"active", func(c *Config) { c.ActiveExperts = 300 }, "ActiveExperts"},
		{"expertffn", func(c *Config) { c.ExpertFFN = 0 }, "ExpertFFN"},
	} {
		t.Run("deepseek/"+tc.name, func(t *testing.T) {
			c := ds
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

func TestKVBytesPerToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		dt   DType
		want uint64
	}{
		{"qwen2-1.5b", BF16, 2 * 28 * 2 * 128 * 2},
		{"llama3-8b", BF16, 2 * 32 * 8 * 128 * 2},
		{"deepseek-v3", BF16, 61 * 576 * 2},
		{"tiny", F32, 2 * 2 * 2 * 16 * 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Presets[tc.name].KVBytesPerToken(tc.dt); got != tc.want {
				t.Errorf("KVBytesPerToken = %d, want %d", got, tc.want)
			}
		})
	}
}
