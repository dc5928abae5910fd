package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/felixge/fgprof"
	"github.com/google/pprof/profile"
	"go.starlark.net/starlark"

	"linger/notebooks/msg"
)

// Wall-clock profiles: a cell whose first line is %%prof, or a call
// prof(fn, *args, **kwargs), runs under fgprof, which samples every
// goroutine 99 times a second, running or waiting, so that a prefill
// that waits on its matmul workers shows the wait beside the compute.
// The profile is shown as a display_data output (flame.go).

// profMagic is the first line that profiles a cell.
const profMagic = "%%prof"

// cutProfMagic returns code with a first line "%%prof" made blank, so
// that the cell's other lines keep their numbers (tracebacks, the sites
// of its allocations), and whether it had one.
func cutProfMagic(code string) (string, bool) {
	first, rest, nl := strings.Cut(code, "\n")
	if strings.TrimRight(first, " \t\r") != profMagic {
		return code, false
	}
	if !nl {
		return "", true
	}
	return "\n" + rest, true
}

// errNoSamples is a profile too short for fgprof to take a sample.
var errNoSamples = errors.New("no samples: it ran for less than fgprof's period (about 10 ms)")

// wallProfile is one fgprof run: the pprof file as fgprof wrote it and
// the profile parsed from it.
type wallProfile struct {
	raw  []byte
	prof *profile.Profile
	wall time.Duration
}

// startProfile starts fgprof; the function it returns stops it and
// returns the profile. fgprof divides by its measured rate, so a run
// with no sample panics in it: that is errNoSamples.
func startProfile() func() (*wallProfile, error) {
	var buf bytes.Buffer
	start := time.Now()
	stop := fgprof.Start(&buf, fgprof.FormatPprof)
	return func() (wp *wallProfile, err error) {
		wall := time.Since(start)
		defer func() {
			if r := recover(); r != nil {
				wp, err = nil, fmt.Errorf("fgprof failed: %v", r)
				if e, ok := r.(runtime.Error); ok && strings.Contains(e.Error(), "divide by zero") {
					err = errNoSamples
				}
			}
		}()
		if err := stop(); err != nil {
			return nil, fmt.Errorf("fgprof: %w", err)
		}
		p, err := profile.ParseData(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("parse fgprof's profile: %w", err)
		}
		return &wallProfile{raw: buf.Bytes(), prof: p, wall: wall}, nil
	}
}

// showProfile makes the display_data of a profile named name ("In [3]")
// and hands it to the running cell's display, or says on stderr why
// there is none.
func (s *session) showProfile(name, file string, wp *wallProfile, err error) {
	if s.display == nil {
		return
	}
	if err != nil {
		s.display(map[string]any{"text/plain": fmt.Sprintf("%s: no wall-clock profile: %v", name, err)})
		return
	}
	s.display(newFlame(wp, name).bundle(file, wp.raw))
}

// profBuiltin is prof(fn, *args, **kwargs): fn's result, and fn's
// wall-clock profile shown as a display_data output as it returns
// (when it fails too).
var profBuiltin = starlark.NewBuiltin("prof", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if len(args) < 1 {
		return nil, fmt.Errorf("%s: want (fn, *args, **kwargs)", b.Name())
	}
	fn, ok := args[0].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("%s: fn must be callable, not %s", b.Name(), args[0].Type())
	}
	s := sessionOf(thread)
	s.profiles++
	name := fmt.Sprintf("prof(%s)", fn.Name())
	file := fmt.Sprintf("prof-%s-%d.pprof", fileSafe(fn.Name()), s.profiles)
	stop := startProfile()
	res, err := starlark.Call(thread, fn, args[1:], kwargs)
	wp, perr := stop()
	s.showProfile(name, file, wp, perr)
	return res, err
})

// fileSafe keeps the letters, digits, '-' and '_' of s.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// profileCell starts a %%prof cell's profile; the function it returns
// stops it and shows it, named after the cell's execution count.
func (k *kernelProc) profileCell(run *cellRun) func() {
	name, file := run.cell, "cell-"+fileSafe(run.cell)+".pprof"
	if run.count > 0 {
		name, file = fmt.Sprintf("In [%d]", run.count), fmt.Sprintf("cell-In%d.pprof", run.count)
	}
	stop := startProfile()
	return func() {
		wp, err := stop()
		k.s.showProfile(name, file, wp, err)
	}
}

// displayData returns the running cell's display: a display_data output
// of data, whose parts over the per-output cap are left out (text/plain
// cut instead); nil for a silent run.
func (k *kernelProc) displayData(m *msg.Message, silent bool) func(map[string]any) {
	if silent {
		return nil
	}
	return func(data map[string]any) {
		for mime, v := range data {
			if s, ok := v.(string); ok && mime == "text/plain" {
				data[mime] = k.capOutput(s)
			} else if b, _ := json.Marshal(v); len(b) > k.maxOutput {
				delete(data, mime)
			}
		}
		k.publish(m, "display_data", map[string]any{"data": data, "metadata": map[string]any{}})
	}
}
