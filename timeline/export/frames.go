package export

import (
	"fmt"
	"slices"
	"strings"

	"linger/timeline/event"
)

// Frames chooses which Go frames of each stack an export writes.
type Frames uint8

const (
	// FramesUser, the default, writes the frames a person reads: the
	// notebook frames, then the Go frames down to the one the cell's
	// Starlark called (the engine's frames and the builtin's, such as
	// linger/kernel.engineGenerate), and folds the interpreter's own
	// frames below into one (see Fold).
	FramesUser Frames = 0
	// FramesAll writes every frame the trace recorded.
	FramesAll Frames = 1
)

// ParseFrames parses "user" (or "") and "all", as the CLI's --frames and
// the server's ?frames= take them.
func ParseFrames(s string) (Frames, error) {
	switch s {
	case "", "user":
		return FramesUser, nil
	case "all":
		return FramesAll, nil
	}
	return FramesUser, fmt.Errorf("parse frames %q: want user (the interpreter's own frames folded) or all", s)
}

// String returns the choice as ParseFrames takes it.
func (f Frames) String() string {
	if f == FramesAll {
		return "all"
	}
	return "user"
}

// kernelLoop are the functions of Linger's kernel that run a cell: its
// protocol loop, from the goroutine's start to Starlark's ExecREPLChunk.
// A site recorded outside cells (the kernel's shutdown) has them below
// the kernel's own frame that freed the memory.
var kernelLoop = []string{
	"linger/kernel.Serve",
	"linger/kernel.(*kernelProc).readLoop",
	"linger/kernel.(*kernelProc).shell",
	"linger/kernel.(*kernelProc).execute",
	"linger/kernel.(*kernelProc).runCell",
	"linger/kernel.(*session).exec",
}

// interpreterStart reports whether the Go function fn is where the
// interpreter's own frames start, going outward from the innermost:
// Starlark's (go.starlark.net/...) or the kernel's cell loop (kernelLoop,
// their closures included).
func interpreterStart(fn string) bool {
	if strings.HasPrefix(fn, "go.starlark.net/") {
		return true
	}
	for _, k := range kernelLoop {
		// the function, or a closure of it (Serve.func4, readLoop.func1)
		if strings.HasPrefix(fn, k) && (len(fn) == len(k) || fn[len(k)] == '.') {
			return true
		}
	}
	return false
}

// Fold returns the Go frames of s an export writes under fr, and how
// many it folded. Under FramesUser the interpreter's own frames are
// folded: from the first frame of Starlark's interpreter or of the
// kernel's cell loop (innermost first), that frame and every frame
// outward of it. They are the same in every site of a kernel (13 of the
// 20 Go frames of an allocation in a helper called from a cell: Starlark's
// Call and CallInternal once per notebook function on the stack,
// ExecREPLChunk, the kernel's loop to the goroutine's start) and say
// nothing the notebook frames do not: the notebook frames stand for them. A binding that calls back into Starlark (the Go
// side of timeline.scope) lies between such frames and is folded with
// them; the builtin the innermost Starlark frame called is kept. The
// capture already leaves out Go's runtime frames (runtime.main,
// runtime.goexit: event.Emitter), and frames outward of the fold, the
// runtime's included, go with it. A program's site (a PyTorch
// snapshot's, a watched Go service's) and a site without such frames (a
// test's, linger generate's) are kept whole. kept aliases s.Frames.
func Fold(s event.Site, fr Frames) (kept []event.Frame, folded int) {
	if fr == FramesAll || s.Program() {
		return s.Frames, 0
	}
	i := slices.IndexFunc(s.Frames, func(f event.Frame) bool { return interpreterStart(f.Func) })
	if i < 0 {
		return s.Frames, 0
	}
	return s.Frames[:i:i], len(s.Frames) - i
}

// FoldedFunc is the function that stands for the folded frames in a
// pprof profile: one function for every stack, so that it is the root of
// every sample of a kernel's profile, at 100 % cumulative.
const FoldedFunc = "(interpreter frames folded)"

// foldedFrame is the frame that stands for n folded frames in a stack
// written as text (Perfetto's args.site).
func foldedFrame(n int) event.Frame {
	return event.Frame{Func: fmt.Sprintf("… %d interpreter frames folded", n)}
}

// foldSite is s as an export under fr names it: its kept Go frames,
// then one frame that says how many were folded.
func foldSite(s event.Site, fr Frames) event.Site {
	kept, n := Fold(s, fr)
	if n > 0 {
		s.Frames = append(kept, foldedFrame(n))
	}
	return s
}
