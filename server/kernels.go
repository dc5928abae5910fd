package server

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"linger/notebooks/msg"
	"linger/server/httperr"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/traces"
)

// kernelManager is what the handlers need of a kernels.Manager; an interface so
// that handler tests can run on an in-process fake.
type kernelManager interface {
	// Specs are the kernelspecs Start knows, the default first.
	Specs() []kernels.Spec
	Start(ctx context.Context, opts kernels.StartOptions) (kernelHandle, error)
	Get(id string) (kernelHandle, bool)
	List() []kernelHandle
	Shutdown(ctx context.Context, id string) error
}

// kernelHandle is what the handlers need of a *kernels.Kernel.
type kernelHandle interface {
	ID() string
	Name() string
	ExecutionState() string
	LastActivity() time.Time
	Send(m *msg.Message) error
	Subscribe() (<-chan *msg.Message, func())
	Interrupt() error
	Restart(ctx context.Context) error
	Recorder() *timeline.Recorder
	Lingering(ctx context.Context) ([]kernels.Holder, error)
	Done() <-chan struct{}
}

// managerKernels adapts a *kernels.Manager to kernelManager.
type managerKernels struct{ m *kernels.Manager }

func (a managerKernels) Specs() []kernels.Spec { return a.m.Specs() }

func (a managerKernels) Start(ctx context.Context, opts kernels.StartOptions) (kernelHandle, error) {
	k, err := a.m.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return k, nil
}

func (a managerKernels) Get(id string) (kernelHandle, bool) {
	k, ok := a.m.Get(id)
	if !ok || k == nil {
		return nil, false
	}
	return k, true
}

func (a managerKernels) List() []kernelHandle {
	ks := a.m.List()
	out := make([]kernelHandle, 0, len(ks))
	for _, k := range ks {
		if k != nil {
			out = append(out, k)
		}
	}
	return out
}

func (a managerKernels) Shutdown(ctx context.Context, id string) error { return a.m.Shutdown(ctx, id) }

// kernelModel is Jupyter's kernel model.
type kernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	LastActivity   string `json:"last_activity"`
	ExecutionState string `json:"execution_state"`
	Connections    int    `json:"connections"`
	// Linger's own: the file name of the current process's trace (a
	// saved trace once the process ends, /timeline/NAME) and of every
	// process's this kernel has run, oldest first, the current last
	// (one more per restart).
	Trace  string   `json:"trace,omitempty"`
	Traces []string `json:"traces,omitempty"`
}

// tracer is what a kernel that records traces adds to kernelHandle
// (*kernels.Kernel does; the handler tests' fake need not).
type tracer interface{ Traces() []string }

// renamable is what a kernel whose traces are named after its notebook
// adds to kernelHandle (*kernels.Kernel does): a session renamed with its
// notebook renames the kernel's next trace.
type renamable interface{ SetPath(path string) }

func (s *Server) kernelModel(k kernelHandle) kernelModel {
	m := kernelModel{
		ID: k.ID(), Name: k.Name(), LastActivity: msg.FormatDate(k.LastActivity()),
		ExecutionState: k.ExecutionState(), Connections: s.connections(k.ID()),
	}
	if t, ok := k.(tracer); ok {
		if m.Traces = t.Traces(); len(m.Traces) > 0 {
			m.Trace = m.Traces[len(m.Traces)-1]
		}
	}
	return m
}

// liveTraces are the file names of the traces kernels are writing now.
func (s *Server) liveTraces() map[string]bool {
	live := map[string]bool{}
	for _, src := range s.sourceEntries() {
		if src.Live && src.Trace != "" {
			live[src.Trace] = true
		}
	}
	for _, k := range s.kernels.List() {
		if t, ok := k.(tracer); ok && k.ExecutionState() != "dead" {
			if ts := t.Traces(); len(ts) > 0 {
				live[ts[len(ts)-1]] = true
			}
		}
	}
	return live
}

func (s *Server) kernel(id string) (kernelHandle, error) {
	k, ok := s.kernels.Get(id)
	if !ok {
		return nil, notFound("kernel %s: %w", id, kernels.ErrNoKernel)
	}
	return k, nil
}

// specModel is Jupyter's kernelspec model of sp: its name, kernel.json
// (the spec) and no resources. The language is starlark, which is what
// cells are; kernel_info's language_info says python for highlighting
// (codemirror_mode and mimetype), since Starlark is Python's syntax and
// editors know no "starlark" mode.
func specModel(sp kernels.Spec) map[string]any {
	argv, md := sp.Argv, sp.Metadata
	if argv == nil {
		argv = []string{}
	}
	if md == nil {
		md = map[string]any{}
	}
	return map[string]any{
		"name": sp.Name,
		"spec": map[string]any{
			"argv":           argv,
			"display_name":   sp.DisplayName,
			"language":       sp.Language,
			"interrupt_mode": "message",
			"env":            map[string]string{},
			"metadata":       md,
		},
		"resources": map[string]string{},
	}
}

// spec returns the kernelspec of that name; "" is the default.
func (s *Server) spec(name string) (kernels.Spec, error) {
	specs := s.kernels.Specs()
	names := make([]string, len(specs))
	for i, sp := range specs {
		if sp.Name == name || name == "" && i == 0 {
			return sp, nil
		}
		names[i] = strconv.Quote(sp.Name)
	}
	return kernels.Spec{}, fmt.Errorf("%w %q (Linger has %s)", kernels.ErrNoSpec, name, strings.Join(names, ", "))
}

func (s *Server) handleKernelspecs(w http.ResponseWriter, r *http.Request) {
	specs := s.kernels.Specs()
	all := make(map[string]any, len(specs))
	def := ""
	for i, sp := range specs {
		if i == 0 {
			def = sp.Name
		}
		all[sp.Name] = specModel(sp)
	}
	writeJSON(w, http.StatusOK, map[string]any{"default": def, "kernelspecs": all})
}

func (s *Server) handleKernelspec(w http.ResponseWriter, r *http.Request) {
	sp, err := s.spec(r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, httperr.Wrap(httperr.NotFound, err)) // a 404 here, though ErrNoSpec is 400 in a start request
		return
	}
	writeJSON(w, http.StatusOK, specModel(sp))
}

func (s *Server) handleKernelList(w http.ResponseWriter, r *http.Request) {
	out := []kernelModel{}
	for _, k := range s.kernels.List() {
		out = append(out, s.kernelModel(k))
	}
	writeJSON(w, http.StatusOK, out)
}

// startKernel starts a kernel of the named spec for the notebook at path,
// in the working directory dir (kernels.StartOptions.Dir; "" the root).
func (s *Server) startKernel(r *http.Request, name, path, dir string) (kernelHandle, error) {
	sp, err := s.spec(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	return s.kernels.Start(ctx, kernels.StartOptions{Name: sp.Name, Path: path, Dir: dir})
}

// workingDirEnv is the variable of a start request's env that names the
// kernel's working directory, as Jupyter Server sends it in gateway mode.
const workingDirEnv = "KERNEL_WORKING_DIR"

func (s *Server) handleKernelStart(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string         `json:"name"`
		Path string         `json:"path"`
		Env  map[string]any `json:"env"`
	}
	if err := readJSON(w, r, 1<<20, &body); err != nil {
		s.writeError(w, r, err)
		return
	}
	dir, ok := body.Env[workingDirEnv].(string)
	if v, set := body.Env[workingDirEnv]; set && !ok {
		s.writeError(w, r, badRequest("env.%s must be a string, a folder's path, not %v", workingDirEnv, v))
		return
	}
	if dir != "" && filepath.IsAbs(dir) && !within(s.opts.Dir, dir) {
		// Jupyter Server in gateway mode sends its own absolute path, of
		// its own file system: when that is not under this server's
		// root, it names nothing here, and refusing would leave its user
		// with no kernel at all. The kernel starts in the root.
		s.log.Warn("kernel working directory is not under the notebook root: the kernel starts in the root",
			"KERNEL_WORKING_DIR", dir)
		dir = ""
	}
	k, err := s.startKernel(r, body.Name, body.Path, dir)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", s.opts.BaseURL+"api/kernels/"+k.ID())
	writeJSON(w, http.StatusCreated, s.kernelModel(k))
}

func (s *Server) handleKernelGet(w http.ResponseWriter, r *http.Request) {
	k, err := s.kernel(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.kernelModel(k))
}

// shutdownKernel shuts kernel id down and drops its trace's timeline
// index: once the kernel is gone no route can reach that trace (the file
// stays, a saved trace).
func (s *Server) shutdownKernel(ctx context.Context, id string) error {
	var rec *timeline.Recorder
	if k, ok := s.kernels.Get(id); ok {
		rec = k.Recorder()
	}
	if err := s.kernels.Shutdown(ctx, id); err != nil {
		return err
	}
	s.traces.Drop(traces.FromRecorder(rec))
	return nil
}

func (s *Server) handleKernelDelete(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	if err := s.shutdownKernel(ctx, r.PathValue("id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.sessions.dropKernel(r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleKernelInterrupt(w http.ResponseWriter, r *http.Request) {
	k, err := s.kernel(r.PathValue("id"))
	if err == nil {
		err = k.Interrupt()
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleKernelRestart(w http.ResponseWriter, r *http.Request) {
	k, err := s.kernel(r.PathValue("id"))
	if err == nil {
		// The old process's trace is out of reach once a new one
		// replaces it: drop its index.
		old := k.Recorder()
		ctx, cancel := ctxTimeout(r)
		err = k.Restart(ctx)
		cancel()
		if err == nil && k.Recorder() != old {
			s.traces.Drop(traces.FromRecorder(old))
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.kernelModel(k))
}

// lingeringHolders is the lingering route's answer: who holds each
// lingering object, and the same holders once per cause
// (kernels.GroupHolders), as linger run says them.
type lingeringHolders struct {
	Holders []kernels.Holder      `json:"holders"`
	Groups  []kernels.HolderGroup `json:"groups"`
}

// handleLingering answers who holds each lingering object in the live
// kernel (for the UI; Linger's own route, not Jupyter's).
func (s *Server) handleLingering(w http.ResponseWriter, r *http.Request) {
	k, err := s.kernel(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := ctxTimeout(r)
	defer cancel()
	hs, err := k.Lingering(ctx)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := lingeringHolders{Holders: hs, Groups: kernels.GroupHolders(hs)}
	if out.Holders == nil {
		out.Holders = []kernels.Holder{}
	}
	if out.Groups == nil {
		out.Groups = []kernels.HolderGroup{}
	}
	writeJSON(w, http.StatusOK, out)
}

// within reports whether path p lies in root (or is root), lexically.
func within(root, p string) bool {
	root, err := filepath.Abs(root)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(root, filepath.Clean(p))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
