package kernels

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var traceName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// traceTimeLayout is the start time in a trace's name: a file name on any
// system (no colons), sorting as time does.
const traceTimeLayout = "2006-01-02T15-04-05"

// TraceName is the file name of the trace of a kernel process for the
// notebook at path started at t: the notebook's name without its
// extension, then the start time, e.g.
// 02-mask-per-chunk-2026-12-03T07-12-05.ltrace ("kernel-…" without a
// notebook). It is a plain file name: letters, digits, '.', '_' and '-',
// no leading dot. n > 1 tells apart processes started in the same second
// ("…T07-12-05-2.ltrace").
func TraceName(path string, t time.Time, n int) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	base = strings.Trim(traceName.ReplaceAllString(base, "_"), "._-")
	if base == "" {
		base = "kernel"
	}
	name := base + "-" + t.Format(traceTimeLayout)
	if n > 1 {
		name += "-" + strconv.Itoa(n)
	}
	return name + ".ltrace"
}

// tracePath names the trace of a new process of k (TraceName), one that
// no other process of this Manager was given and no file in the trace
// directory has.
func (k *Kernel) tracePath() string {
	k.mu.Lock()
	path := k.path
	k.mu.Unlock()
	m, now := k.m, time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := 1; ; n++ {
		name := TraceName(path, now, n)
		p := filepath.Join(m.opts.TraceDir, name)
		if m.names[name] {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		m.names[name] = true
		return p
	}
}

// TracePath is the current process's trace file.
func (k *Kernel) TracePath() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return ""
	}
	return k.proc.trace
}

// Traces are the file names of the traces of every process this kernel
// has run, oldest first: the current process's last, the earlier ones
// (before each restart) saved traces.
func (k *Kernel) Traces() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, len(k.traces))
	for i, p := range k.traces {
		out[i] = filepath.Base(p)
	}
	return out
}
