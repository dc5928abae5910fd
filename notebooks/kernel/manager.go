package kernel

import (
	"context"
	"errors"
	"time"

	"linger/notebooks/msg"
	"linger/timeline"
)

// ErrNoKernel is returned for a kernel id the Manager does not know.
var ErrNoKernel = errors.New("no such kernel")

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	// Command starts a kernel process, e.g. {"/path/to/linger", "kernel"}.
	Command []string
	// TraceDir is where each kernel process's trace log goes (one .ltrace
	// per process).
	TraceDir string
	// Dir is the notebook root, a kernel's working directory.
	Dir string
	// Env is added to the kernel process's environment.
	Env []string
}

// StartOptions says which kernel to start.
type StartOptions struct {
	// Name is the kernelspec name; "" and "linger" are the one kernel.
	Name string
	// Path is the notebook path, used to name the trace file.
	Path string
}

// Holder is one lingering object and the reference path that keeps it
// alive in the kernel.
type Holder struct {
	Addr     uint64 `json:"addr"`
	Size     uint64 `json:"size"`
	Category string `json:"category"`
	Label    string `json:"label"`
	Site     string `json:"site"`
	// Path is the chain of references from a root (a global, a closure, an
	// engine registry) to the object, e.g.
	// "global last_cache → KVCache#3 → layer[5].k"; empty when no path was
	// found.
	Path string `json:"path"`
}

// Manager starts and tracks kernel processes. It is safe for concurrent
// use.
type Manager struct {
	opts ManagerOptions
}

// NewManager returns a Manager starting kernels as opts says.
func NewManager(opts ManagerOptions) *Manager { return &Manager{opts: opts} }

// Start starts a kernel process and returns once it is ready.
func (m *Manager) Start(ctx context.Context, opts StartOptions) (*Kernel, error) {
	return nil, errors.New("kernel: not built yet")
}

// Get returns the kernel with the given id.
func (m *Manager) Get(id string) (*Kernel, bool) { return nil, false }

// List returns every kernel, ordered by start time.
func (m *Manager) List() []*Kernel { return nil }

// Shutdown ends a kernel for good; ErrNoKernel if id is unknown.
func (m *Manager) Shutdown(ctx context.Context, id string) error { return ErrNoKernel }

// Close shuts every kernel down.
func (m *Manager) Close() error { return nil }

// Kernel is one kernel. It survives restarts (same ID, new process). Its
// methods are safe for concurrent use.
type Kernel struct{}

// ID is the kernel's UUID.
func (k *Kernel) ID() string { return "" }

// Name is the kernelspec name.
func (k *Kernel) Name() string { return "" }

// ExecutionState is "starting", "idle", "busy", "restarting" or "dead".
func (k *Kernel) ExecutionState() string { return "dead" }

// LastActivity is when the kernel last sent or received a message.
func (k *Kernel) LastActivity() time.Time { return time.Time{} }

// Send delivers a client's shell, control or stdin message.
func (k *Kernel) Send(m *msg.Message) error { return ErrNoKernel }

// Subscribe returns every message from the kernel and a cancel function.
func (k *Kernel) Subscribe() (<-chan *msg.Message, func()) {
	c := make(chan *msg.Message)
	close(c)
	return c, func() {}
}

// Interrupt stops the running cell.
func (k *Kernel) Interrupt() error { return ErrNoKernel }

// Restart replaces the process.
func (k *Kernel) Restart(ctx context.Context) error { return ErrNoKernel }

// Recorder is the current process's trace.
func (k *Kernel) Recorder() *timeline.Recorder { return nil }

// TracePath is the current process's trace file.
func (k *Kernel) TracePath() string { return "" }

// Lingering asks the live kernel who holds each lingering object.
func (k *Kernel) Lingering(ctx context.Context) ([]Holder, error) { return nil, ErrNoKernel }

// Done is closed when the kernel is shut down for good.
func (k *Kernel) Done() <-chan struct{} { return nil }
