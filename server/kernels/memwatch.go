package kernels

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"linger/internal/units"
	"linger/kernel/wire"
)

// memoryPoll is how often the Manager reads a kernel's resident set.
const memoryPoll = 20 * time.Millisecond

// watchMemory kills p when its resident set goes over limit by
// wire.MemoryMargin, until p exits; its death's reason then says so. The
// kernel stops its own cells at limit (a MemoryError) and exits itself at
// the same mark, but only while its Go runtime lets its watchdog run: a
// single builtin copying gigabytes holds every goroutine in a collection
// that waits for it. This watch, in another process, does not wait. Where
// the resident set cannot be read (not Linux), it does nothing.
func (p *process) watchMemory(limit uint64) {
	pid := p.cmd.Process.Pid
	t := time.NewTicker(memoryPoll)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		rss, ok := residentSet(pid)
		if !ok {
			return
		}
		if rss <= limit+wire.MemoryMargin(limit) {
			continue
		}
		why := fmt.Sprintf("%s: its resident set reached %s; the server stopped it", wire.MemoryExceeded(limit), units.Format(rss))
		p.overMemory.Store(&why)
		_ = p.cmd.Process.Kill()
		return
	}
}

// pageSize is the unit of /proc/PID/statm.
var pageSize = uint64(os.Getpagesize())

// residentSet reads a process's resident set in bytes from
// /proc/PID/statm (its second field, in pages).
func residentSet(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[1]), 10, 64)
	return n * pageSize, err == nil
}
