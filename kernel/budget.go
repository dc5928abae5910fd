package kernel

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"linger/engine/device"
	"linger/internal/units"
	"linger/kernel/wire"
)

// MemoryEnv names the environment variable that sets the kernel's memory
// budget in bytes when Options.Memory is 0 (linger serve --kernel-memory
// sets it for every kernel it starts).
const MemoryEnv = wire.MemoryEnv

// DefaultMemory is the memory budget of one kernel on a host that may use
// host bytes in all (the machine's memory, or its cgroup's limit: see
// device.HostLimit): three eighths of it, so that two kernels together
// leave a quarter to the server, the browser and the system. At least
// 1 GiB, or the whole host when it has less; 0 (unknown host): 4 GiB.
func DefaultMemory(host uint64) uint64 {
	if host == 0 {
		return 4 << 30
	}
	return max(host/8*3, min(host, 1<<30))
}

// memoryBudget resolves Options.Memory: itself, or MemoryEnv, or
// DefaultMemory of the host.
func memoryBudget(opt uint64) uint64 {
	if opt != 0 {
		return opt
	}
	if v, err := strconv.ParseUint(os.Getenv(MemoryEnv), 10, 64); err == nil && v > 0 {
		return v
	}
	return DefaultMemory(device.HostLimit())
}

const (
	// memoryTick is how often the watchdog reads the kernel's memory. A
	// Starlark step allocates at most 1 GiB (Starlark's own cap), at a
	// few GB/s: a cell overshoots its budget by about a step.
	memoryTick = 10 * time.Millisecond
	// hostReserve is the machine's available memory a host device leaves
	// to everyone else: an allocation that would leave less fails.
	hostReserve = 256 << 20
	// minGoLimit is the floor of the Go runtime's soft limit, however
	// much of the budget the devices hold: below it the collector would
	// run without pause.
	minGoLimit = 64 << 20
)

// budgetMetrics are what the watchdog reads of the Go runtime: the memory
// it has mapped, the part returned to the OS, and the free heap it keeps
// (what debug.SetMemoryLimit counts is total minus released).
var budgetMetrics = [...]string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}

// budget is a kernel's memory budget: the Go runtime's memory plus the
// segments of its host-memory devices (cpu) stay within limit. Devices
// that are not host memory (meta, cuda) are not in it.
//
// It is kept three ways. Host devices ask headroom before every segment,
// so an engine or tensor over the budget is an ordinary out-of-memory
// error with its oom event. The Go runtime gets a soft limit of what the
// devices leave (debug.SetMemoryLimit), so that garbage is collected
// before it counts. And the watchdog (watch) stops a cell whose live Go
// memory goes over the budget with MemoryError, and ends the kernel
// (exit status wire.ExitMemoryLimit) when it is far over and still there.
type budget struct {
	limit uint64

	mu      sync.Mutex
	devs    []*device.CPU
	samples []metrics.Sample
	soft    uint64 // the soft limit last set

	// The machine's available memory, read at most every hostTTL (it
	// costs tens of µs), and the kernel's use when it was read: what the
	// kernel took since comes off it.
	hostMu    sync.Mutex
	hostAt    time.Time
	hostAvail uint64
	hostUse   uint64
	hostOK    bool
}

func newBudget(limit uint64) *budget {
	b := &budget{limit: limit, samples: make([]metrics.Sample, len(budgetMetrics))}
	for i, name := range budgetMetrics {
		b.samples[i].Name = name
	}
	b.setSoftLimit(0)
	return b
}

// margin is how far over the limit the kernel may be, with its cell
// stopped, before the watchdog ends it.
func (b *budget) margin() uint64 { return wire.MemoryMargin(b.limit) }

// adopt makes d's memory part of the budget when d is host memory.
func (b *budget) adopt(d device.Device) {
	c, ok := d.(*device.CPU)
	if !ok {
		return
	}
	b.mu.Lock()
	b.devs = append(b.devs, c)
	b.mu.Unlock()
	c.Budget(b.limit, b.headroom)
}

// goMemory reads the Go runtime's memory: held is what it has mapped and
// not released (what the soft limit counts), free the part of it that is
// free heap, not yet returned to the OS.
func (b *budget) goMemory() (held, free uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	metrics.Read(b.samples)
	total, released, heapFree := b.samples[0].Value.Uint64(), b.samples[1].Value.Uint64(), b.samples[2].Value.Uint64()
	return total - released, heapFree
}

// deviceUsed is the bytes of the host devices' segments.
func (b *budget) deviceUsed() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var used uint64
	for _, d := range b.devs {
		free, total := d.MemInfo()
		used += total - free
	}
	return used
}

// headroom is what a host device may take now: what the budget has left
// beside the Go runtime and the devices' segments, and no more than the
// machine has available beyond hostReserve. The free heap the runtime
// keeps is not counted: the soft limit, lowered as the segment is taken,
// makes the runtime return it. When need is over that, garbage is
// collected and the room read again: dead Go objects are not the cell's.
func (b *budget) headroom(need uint64) uint64 {
	room := b.room(false)
	if need > room {
		room = b.room(true)
	}
	return room
}

func (b *budget) room(live bool) uint64 {
	u := b.read(live).total()
	room := sub(b.limit, u)
	if avail, ok := b.hostAvailable(u, live); ok {
		room = min(room, sub(avail, hostReserve))
	}
	return room
}

// hostTTL is how long a reading of the machine's available memory serves.
const hostTTL = 50 * time.Millisecond

// hostAvailable is the machine's available memory now, given the kernel's
// use now: read again when fresh is set or the last reading is older than
// hostTTL, else the last reading less what the kernel took since.
func (b *budget) hostAvailable(use uint64, fresh bool) (uint64, bool) {
	b.hostMu.Lock()
	defer b.hostMu.Unlock()
	if now := time.Now(); fresh || now.Sub(b.hostAt) > hostTTL {
		b.hostAvail, b.hostOK = device.HostAvailable()
		b.hostAt, b.hostUse = now, use
	}
	return sub(b.hostAvail, sub(use, b.hostUse)), b.hostOK
}

// setSoftLimit gives the Go runtime what the devices leave of the budget.
// It is set again only when that moved by 16 MiB.
func (b *budget) setSoftLimit(devUsed uint64) {
	soft := max(sub(b.limit, devUsed), minGoLimit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := int64(soft) - int64(b.soft); b.soft != 0 && d < 16<<20 && d > -16<<20 {
		return
	}
	b.soft = soft
	debug.SetMemoryLimit(int64(min(soft, math.MaxInt64)))
}

// sub is a-b, or 0 when b is larger.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// use is what the kernel holds against its budget: the Go runtime's
// memory (live, after a collection, when live is set) and the host
// devices' segments.
type use struct{ goMem, dev uint64 }

func (u use) total() uint64 { return u.goMem + u.dev }

// read returns the kernel's use now, not counting the free heap the
// runtime keeps; live collects garbage first.
func (b *budget) read(live bool) use {
	if live {
		runtime.GC()
	}
	held, free := b.goMemory()
	return use{goMem: sub(held, free), dev: b.deviceUsed()}
}

// exceeded is the message of a cell stopped, or a kernel ended, over the
// budget.
func (b *budget) exceeded(u use) string {
	return fmt.Sprintf("%s: the kernel holds %s (Go heap and runtime %s, cpu device %s)",
		wire.MemoryExceeded(b.limit), units.Format(u.total()), units.Format(u.goMem), units.Format(u.dev))
}

// watch is the watchdog: every memoryTick until stop, it lowers the Go
// soft limit as devices fill, and when the kernel is over its budget with
// a cell running that grew it, stops the cell (k.stopForMemory). A kernel
// still over the budget by margin after a collection, cell or not, can
// no longer be brought back: it writes why on stderr and exits with
// wire.ExitMemoryLimit, which the server reports as the kernel's death.
func (k *kernelProc) watch(stop <-chan struct{}) {
	b := k.budget
	t := time.NewTicker(memoryTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		}
		u := b.read(false)
		b.setSoftLimit(u.dev)
		if u.total() <= b.limit {
			continue
		}
		run, base := k.running()
		if run == nil && u.total() <= b.limit+b.margin() {
			continue // idle: what the cells left is theirs to free
		}
		u = b.read(true)
		if u.total() <= b.limit {
			continue
		}
		if run != nil && u.total() > base {
			k.stopForMemory(run, b.exceeded(u))
		}
		if u.total() > b.limit+b.margin() {
			fmt.Fprintf(os.Stderr, "linger kernel: %s; the kernel exits\n", b.exceeded(u))
			os.Exit(wire.ExitMemoryLimit)
		}
	}
}

// running returns the running cell, if it has started its thread, and
// the kernel's memory use when it started.
func (k *kernelProc) running() (*cellRun, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil || k.cur.thread == nil || k.cur.memory != "" {
		return nil, 0
	}
	return k.cur, k.cur.startUse
}

// stopForMemory stops run as an interrupt would, its error a MemoryError
// with why.
func (k *kernelProc) stopForMemory(run *cellRun, why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if run.memory != "" {
		return
	}
	run.memory = why
	run.thread.Cancel(why)
	run.cancel()
}

// preferOOMKill tells Linux's OOM killer to pick this kernel before the
// server and the rest of the session should the machine run out of memory
// anyway (another process's doing, or a bomb faster than the watchdog):
// the server then reports the kernel's death and keeps its other kernels.
// Raising one's own score needs no privilege; elsewhere it does nothing.
func preferOOMKill() {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("500"), 0)
}
