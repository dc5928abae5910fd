package kernels

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"linger/kernel/wire"
	"linger/notebooks/msg"
)

// ErrNoKernel is returned for a kernel id the Manager does not know.
var ErrNoKernel = errors.New("no such kernel")

// ErrNoSpec is returned for a kernelspec name the Manager does not know.
var ErrNoSpec = errors.New("no such kernelspec")

// ErrWorkingDir is returned for a StartOptions.Dir that is not a folder
// inside the notebook root.
var ErrWorkingDir = errors.New("bad kernel working directory")

// ManagerOptions configures a Manager.
type ManagerOptions struct {
	// Specs are the kernels the Manager starts, by name; the first is the
	// default, for StartOptions.Name "". Nil means one, LingerSpec(Command...).
	Specs []Spec
	// Command starts a kernel process, e.g. {"/path/to/linger", "kernel"},
	// when Specs is nil.
	Command []string
	// TraceDir is where each kernel process's trace log goes (one .ltrace
	// per process).
	TraceDir string
	// Dir is the notebook root, a kernel's working directory.
	Dir string
	// Env is added to the kernel process's environment.
	Env []string
	// Memory is each kernel's memory budget in bytes, given to the
	// process (wire.MemoryEnv), which keeps its cells within it.
	// The Manager also watches the process's resident set and kills it
	// when it is over Memory by wire.MemoryMargin: the kernel's own
	// watchdog cannot act while its runtime waits out one long copy.
	// 0: the kernel's default, and no watch.
	Memory uint64
}

// StartOptions says which kernel to start.
type StartOptions struct {
	// Name is the kernelspec name, one of ManagerOptions.Specs; "" is the
	// first.
	Name string
	// Path is the notebook path, used to name the trace file.
	Path string
	// Dir is the process's working directory: relative to
	// ManagerOptions.Dir, or absolute; either way a folder inside it
	// (symlinks resolved), else Start fails with ErrWorkingDir. "" is
	// ManagerOptions.Dir. Restarts keep it.
	Dir string
}

// Holder is one lingering object and the reference path that keeps it
// alive in the kernel, as the kernel's lingering reply carries it.
type Holder = wire.Holder

// Manager starts and tracks kernel processes. It is safe for concurrent
// use.
type Manager struct {
	opts   ManagerOptions
	ctx    context.Context // ends every kernel process at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	kernels map[string]*Kernel
	order   []*Kernel
	// names are the trace file names given out, so that two processes
	// started in the same second never share one.
	names map[string]bool
}

// NewManager returns a Manager starting kernels as opts says.
func NewManager(opts ManagerOptions) *Manager {
	if opts.Specs == nil {
		opts.Specs = []Spec{LingerSpec(opts.Command...)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{opts: opts, ctx: ctx, cancel: cancel, kernels: map[string]*Kernel{}, names: map[string]bool{}}
}

// StartTimeout bounds how long a kernel process may take to say hello.
const StartTimeout = 30 * time.Second

// stopGrace is how long a kernel asked to shut down may take before it is
// killed.
const stopGrace = 2 * time.Second

// subscriberBuffer is how many messages a subscriber may fall behind
// before its subscription is closed.
const subscriberBuffer = 4096

// Start starts a kernel process and returns once it has said hello. ctx
// bounds only the start; the process lives until Shutdown or Close.
func (m *Manager) Start(ctx context.Context, opts StartOptions) (*Kernel, error) {
	spec, ok := m.Spec(opts.Name)
	if !ok {
		return nil, fmt.Errorf("start kernel: %w %q (have %s)", ErrNoSpec, opts.Name, m.specNames())
	}
	if len(spec.Argv) == 0 {
		return nil, fmt.Errorf("start kernel %q: no kernel command configured", spec.Name)
	}
	dir, err := m.workingDir(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("start kernel: %w", err)
	}
	k := &Kernel{m: m, id: msg.NewID(), name: spec.Name, argv: spec.Argv, path: opts.Path, dir: dir, state: "starting",
		last: time.Now(), subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	if err := k.startProcess(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.kernels[k.id] = k
	m.order = append(m.order, k)
	m.mu.Unlock()
	return k, nil
}

// workingDir resolves a StartOptions.Dir (see there) to the folder a
// kernel process starts in. Its errors name dir as the client gave it,
// never the root's absolute path.
func (m *Manager) workingDir(dir string) (string, error) {
	if dir == "" {
		return m.opts.Dir, nil
	}
	root, err := filepath.Abs(cmp.Or(m.opts.Dir, "."))
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return "", fmt.Errorf("notebook root: %w", err)
	}
	p := dir
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, p)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%w %q: no such folder in the notebook root", ErrWorkingDir, dir)
	}
	if rel, err := filepath.Rel(root, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w %q: outside the notebook root", ErrWorkingDir, dir)
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w %q: not a folder", ErrWorkingDir, dir)
	}
	return resolved, nil
}

// Specs returns the kernelspecs the Manager starts, the default first.
func (m *Manager) Specs() []Spec { return append([]Spec(nil), m.opts.Specs...) }

// Spec returns the kernelspec of that name; "" is the default.
func (m *Manager) Spec(name string) (Spec, bool) {
	if len(m.opts.Specs) == 0 {
		return Spec{}, false
	}
	if name == "" {
		return m.opts.Specs[0], true
	}
	for _, s := range m.opts.Specs {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// specNames lists the kernelspec names for an error: "linger", "linger-cuda".
func (m *Manager) specNames() string {
	names := make([]string, len(m.opts.Specs))
	for i, s := range m.opts.Specs {
		names[i] = strconv.Quote(s.Name)
	}
	return strings.Join(names, ", ")
}

// Get returns the kernel with the given id.
func (m *Manager) Get(id string) (*Kernel, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.kernels[id]
	return k, ok
}

// List returns every kernel, in start order.
func (m *Manager) List() []*Kernel {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*Kernel(nil), m.order...)
}

// Shutdown ends a kernel for good: a graceful shutdown, then a kill after
// a grace period (or when ctx ends). It returns ErrNoKernel for an unknown
// id.
func (m *Manager) Shutdown(ctx context.Context, id string) error {
	m.mu.Lock()
	k, ok := m.kernels[id]
	if ok {
		delete(m.kernels, id)
		for i, x := range m.order {
			if x == k {
				m.order = append(m.order[:i], m.order[i+1:]...)
				break
			}
		}
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("shutdown %s: %w", id, ErrNoKernel)
	}
	k.shutdown(ctx)
	return nil
}

// Close shuts every kernel down.
func (m *Manager) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*stopGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, k := range m.List() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = m.Shutdown(ctx, k.ID()) }()
	}
	wg.Wait()
	m.cancel()
	return nil
}
