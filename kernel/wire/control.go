package wire

import (
	"strings"

	"linger/internal/units"
)

// Protocol is the version of the pipe protocol a kernel speaks, in its
// Hello.
const Protocol = 1

// Hello is the kernel's first frame.
type Hello struct {
	Protocol       int    `json:"protocol"`
	Implementation string `json:"implementation"`
	PID            int    `json:"pid"`
	// Session is the process's kernel session id: every message the
	// kernel sends carries it in header.session, and a restart (a new
	// process) has a new one, as the messaging spec asks.
	Session string `json:"session"`
}

// Control operations.
const (
	OpInterrupt      = "interrupt"       // server → kernel: stop the running cell
	OpShutdown       = "shutdown"        // server → kernel: end the process
	OpLingering      = "lingering"       // server → kernel: who holds each lingering object?
	OpLingeringReply = "lingering_reply" // kernel → server: the answer, Holders, same ID
	// OpHolders is the kernel telling, unasked, what held the objects that
	// newly lingered (at a cell's end) or linger when the teardown begins:
	// Holders with AllocSeq set, Seq the last event before the walk and
	// Reason when it ran. It follows the events it speaks of on the pipe;
	// the server records it in the trace (timeline.Holders).
	OpHolders = "holders"
)

// Control is a control frame's payload.
type Control struct {
	Op      string   `json:"op"` // one of the Op constants
	ID      string   `json:"id,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
	Error   string   `json:"error,omitempty"`
	// Seq and Reason, for OpHolders.
	Seq    uint64 `json:"seq,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Holder is one lingering object and the reference path that keeps it
// alive in the kernel.
type Holder struct {
	Addr uint64 `json:"addr"`
	// Size is the allocator's block; Requested the bytes asked for.
	Size      uint64 `json:"size"`
	Requested uint64 `json:"requested"`
	Category  string `json:"category"`
	Label     string `json:"label"`
	Site      string `json:"site"`
	// Path is the chain of references from a root (a global, a closure, an
	// engine registry) to the object, e.g.
	// "global last_cache → KVCache#3 → layer[5].k"; empty when no path was
	// found.
	Path string `json:"path"`
	// AllocSeq is the sequence number of the object's allocation in the
	// kernel's trace (of its segment_alloc, for memory outside the
	// allocator): what names it in a trace, where addresses are reused.
	AllocSeq uint64 `json:"alloc_seq,omitempty"`
}

// ExitMemoryLimit is the exit status of a kernel that ended itself over
// its memory budget; its last line on stderr says so ("linger kernel:
// kernel memory limit of 8 GiB exceeded: ..."), and the server makes that
// line the kernel's death reason.
const ExitMemoryLimit = 3

// MemoryEnv names the environment variable that gives a kernel process
// its memory budget in bytes (the Manager's ManagerOptions.Memory;
// kernel.Options.Memory when that is 0).
const MemoryEnv = "LINGER_KERNEL_MEMORY"

// MemoryExceeded is how every report of a kernel over its memory budget
// begins, in the kernel (a cell's MemoryError, its exit) and in the
// server (a kernel it stopped): "kernel memory limit of 8 GiB exceeded".
func MemoryExceeded(limit uint64) string {
	return "kernel memory limit of " + strings.Replace(units.Format(limit), ".0 ", " ", 1) + " exceeded"
}

// MemoryMargin is how far over its budget of limit bytes a kernel may
// go, its cell stopped, before it is ended: by itself (ExitMemoryLimit),
// or by the server, which watches its resident set.
func MemoryMargin(limit uint64) uint64 { return max(limit/4, 512<<20) }
