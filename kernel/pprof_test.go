package kernel

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/export"
)

// A kernel's profile: every allocation a cell makes goes through the
// kernel's cell loop, so the outermost frame of every sample is the same
// function, at 100 % cumulative (with sites cut at 8 Go frames it was
// engine or interpreter frames, a different one per site): the one that
// stands for the interpreter's own frames, folded by default, or with
// every frame kept, a function of this package's cell loop.
func TestPprofKernelRoot(t *testing.T) {
	c := startKernel(t)
	c.exec(`e = engine(model="tiny", device="meta")
def run(n):
    return e.generate(prompt_tokens=n, chunk_size=32, max_new_tokens=2, keep_cache=True)
r = run(64)
t = tensor([1024, 64], expect="cell")`)
	c.exec(`x = 1`) // the first cell has ended, its events flushed by now
	for _, frames := range []export.Frames{export.FramesUser, export.FramesAll} {
		var b bytes.Buffer
		if err := export.Pprof(&b, &c.log, export.PprofOptions{At: export.AtEnd, Frames: frames}); err != nil {
			t.Fatal(err)
		}
		p, err := profile.Parse(&b)
		if err != nil {
			t.Fatal(err)
		}
		roots := map[string]int64{}
		var total int64
		for _, s := range p.Sample {
			if s.Value[1] == 0 || s.Location[0].Line[0].Function.Name == "unknown" {
				continue
			}
			total += s.Value[1]
			roots[s.Location[len(s.Location)-1].Line[0].Function.Name] += s.Value[1]
		}
		if total == 0 || len(roots) != 1 {
			t.Fatalf("frames %s: alloc_space of %d bytes by outermost frame: %v; want one root", frames, total, roots)
		}
		for root := range roots {
			if frames == export.FramesUser && root != export.FoldedFunc {
				t.Errorf("root %s, want %s", root, export.FoldedFunc)
			}
			if frames == export.FramesAll && !strings.HasPrefix(root, "linger/kernel.") {
				t.Errorf("frames all: root %s, want the kernel's cell loop", root)
			}
			t.Logf("frames %s: root %s: 100%% of %d bytes", frames, root, total)
		}
	}
}
