package goheap

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"path"
	"strings"

	"github.com/google/pprof/profile"

	"linger/timeline/event"
)

// maxFrames bounds the frames a site keeps (Go's profiles record at most
// 128; the innermost are the ones that tell).
const maxFrames = 64

// stdRoots are the first elements of the standard library's package
// paths (GOROOT/src), and cmd's.
var stdRoots = map[string]bool{}

func init() {
	for _, r := range strings.Fields(`archive arena bufio builtin bytes cmd cmp compress container context crypto database debug
		embed encoding errors expvar flag fmt go hash html image index internal io iter log maps math mime net os path plugin
		reflect regexp runtime simd slices sort strconv strings structs sync syscall testing text time unicode unique unsafe vendor weak`) {
		stdRoots[r] = true
	}
}

// Package returns the import path of a Go function's symbol name:
// "net/http" for "net/http.(*conn).serve", "github.com/a/b" for
// "github.com/a/b.(*T).M[...]", "main" for "main.main".
func Package(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 { // type arguments may hold slashes and dots
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// Std reports whether the function fn (a symbol name) is the Go
// runtime's or the standard library's, or the toolchain's own
// ("go:buildid", "type:.eq.T").
func Std(fn string) bool {
	if strings.HasPrefix(fn, "go:") || strings.HasPrefix(fn, "type:") || strings.HasPrefix(fn, "gcWriteBarrier") {
		return true
	}
	pkg := Package(fn)
	first, _, _ := strings.Cut(pkg, "/")
	return stdRoots[first] && !strings.Contains(first, ".")
}

// Dependency reports whether frame f is another module's code: a file in
// the module cache, or under a path with a module's version (a binary
// built with -trimpath), or vendored.
func Dependency(f event.Frame) bool {
	return strings.Contains(f.File, "/pkg/mod/") || strings.Contains(f.File, "@v") || strings.Contains(f.File, "/vendor/")
}

// Own returns the frames of the service's own code among frames
// (innermost first), outermost first as a traceback reads: every frame
// neither the standard library's (Std) nor another module's
// (Dependency); when there is none of those, every frame that is not the
// standard library's (a service built from the module cache, whose own
// files are there too). None when every frame is the standard
// library's.
func Own(frames []event.Frame) []event.Frame {
	pick := func(dep bool) []event.Frame {
		var out []event.Frame
		for i := len(frames) - 1; i >= 0; i-- {
			if f := frames[i]; !Std(f.Func) && (dep || !Dependency(f)) {
				out = append(out, f)
			}
		}
		return out
	}
	if own := pick(false); len(own) > 0 {
		return own
	}
	return pick(true)
}

// frames are a profile sample's stack as Go frames, innermost first,
// inlined calls expanded (a location's lines are innermost first), at
// most maxFrames.
func frames(s *profile.Sample, buf []event.Frame) []event.Frame {
	buf = buf[:0]
	for _, loc := range s.Location {
		if len(loc.Line) == 0 {
			buf = append(buf, event.Frame{Func: fmt.Sprintf("0x%x", loc.Address)})
		}
		for _, l := range loc.Line {
			var f event.Frame
			if l.Function != nil {
				f.Func, f.File = l.Function.Name, l.Function.Filename
			}
			f.Line = int(l.Line)
			buf = append(buf, f)
		}
		if len(buf) >= maxFrames {
			return buf[:maxFrames]
		}
	}
	return buf
}

// key is what tells two stacks apart: a hash of their frames (64 bits:
// a service has thousands of stacks, not billions).
func key(fs []event.Frame, seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var n [8]byte
	for _, f := range fs {
		h.WriteString(f.Func)
		h.WriteByte(0)
		h.WriteString(f.File)
		binary.LittleEndian.PutUint64(n[:], uint64(f.Line))
		h.Write(n[:])
	}
	return h.Sum64()
}

// newSite is the site of a stack: all its frames, and its own code's
// among them (a program's site, named by the innermost of those).
func newSite(fs []event.Frame) event.Site {
	s := event.Site{Frames: append([]event.Frame(nil), fs...)}
	if own := Own(fs); len(own) > 0 {
		s.Stack = own
	}
	return s
}

// label names a site in a line: its innermost own frame's function,
// without the package's directories, and where: "main.leak
// (leak.go:42)"; the innermost frame when it has no own code.
func label(s event.Site) string {
	var f event.Frame
	switch {
	case len(s.Stack) > 0:
		f = s.Stack[len(s.Stack)-1]
	case len(s.Frames) > 0:
		f = s.Frames[0]
	default:
		return "unknown"
	}
	fn := f.Func
	if i := strings.LastIndexByte(Package(fn), '/'); i >= 0 {
		fn = fn[i+1:]
	}
	if f.File == "" {
		return fn
	}
	return fmt.Sprintf("%s (%s:%d)", fn, path.Base(f.File), f.Line)
}
