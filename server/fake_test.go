package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"linger/notebooks/contents"
	"linger/notebooks/msg"
	"linger/notebooks/nbformat"
	"linger/server/httperr"
	"linger/server/kernels"
	"linger/timeline"
)

// fakeKernels is an in-process stand-in for kernels.Manager: handler tests
// need kernels that answer at once, without processes.
type fakeKernels struct {
	specs []kernels.Spec // nil: the plain kernel alone

	mu sync.Mutex
	ks map[string]*fakeKernel
	n  int
}

func newFakeKernels() *fakeKernels { return &fakeKernels{ks: map[string]*fakeKernel{}} }

func (f *fakeKernels) Specs() []kernels.Spec {
	if f.specs == nil {
		return []kernels.Spec{kernels.LingerSpec("linger", "kernel")}
	}
	return f.specs
}

func (f *fakeKernels) Start(ctx context.Context, opts kernels.StartOptions) (kernelHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	name := opts.Name
	if name == "" {
		name = kernels.LingerSpecName
	}
	k := &fakeKernel{id: msg.NewID(), name: name, state: "idle", order: f.n,
		subs: map[int]chan *msg.Message{}, done: make(chan struct{}), last: time.Now()}
	f.ks[k.id] = k
	return k, nil
}

func (f *fakeKernels) Get(id string) (kernelHandle, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, ok := f.ks[id]
	if !ok {
		return nil, false
	}
	return k, true
}

func (f *fakeKernels) get(id string) *fakeKernel {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ks[id]
}

func (f *fakeKernels) List() []kernelHandle {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ks []*fakeKernel
	for _, k := range f.ks {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].order < ks[j].order })
	out := make([]kernelHandle, len(ks))
	for i, k := range ks {
		out[i] = k
	}
	return out
}

func (f *fakeKernels) Shutdown(ctx context.Context, id string) error {
	f.mu.Lock()
	k, ok := f.ks[id]
	delete(f.ks, id)
	f.mu.Unlock()
	if !ok {
		return kernels.ErrNoKernel
	}
	k.mu.Lock()
	k.state = "dead"
	for i, c := range k.subs {
		close(c)
		delete(k.subs, i)
	}
	k.mu.Unlock()
	close(k.done)
	return nil
}

// fakeKernel evaluates "A+B" of integers and publishes what a kernel does
// for an execute_request.
type fakeKernel struct {
	id, name string
	order    int
	done     chan struct{}

	mu          sync.Mutex
	state       string
	last        time.Time
	subs        map[int]chan *msg.Message
	nsub        int
	count       int
	interrupts  int
	restarts    int
	subCapacity int
}

func (k *fakeKernel) ID() string   { return k.id }
func (k *fakeKernel) Name() string { return k.name }
func (k *fakeKernel) ExecutionState() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state
}
func (k *fakeKernel) LastActivity() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}
func (k *fakeKernel) Recorder() *timeline.Recorder { return nil }
func (k *fakeKernel) Done() <-chan struct{}        { return k.done }

func (k *fakeKernel) Lingering(ctx context.Context) ([]kernels.Holder, error) {
	if err := k.alive(); err != nil {
		return nil, err
	}
	return []kernels.Holder{{Addr: 4096, Size: 1 << 20, Category: "kv_cache", Path: "global last_cache → KVCache#1 → layer[0].k"}}, nil
}

func (k *fakeKernel) Subscribe() (<-chan *msg.Message, func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.subCapacity
	if n == 0 {
		n = 256
	}
	c := make(chan *msg.Message, n)
	k.nsub++
	i := k.nsub
	k.subs[i] = c
	return c, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if c, ok := k.subs[i]; ok {
			close(c)
			delete(k.subs, i)
		}
	}
}

// publish fans m out; a full subscriber is cut off, as the Manager does.
func (k *fakeKernel) publish(m *msg.Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, c := range k.subs {
		select {
		case c <- m:
		default:
			close(c)
			delete(k.subs, i)
		}
	}
}

func (k *fakeKernel) status(parent *msg.Message, state string) {
	k.mu.Lock()
	k.state = state
	k.mu.Unlock()
	s := msg.New(msg.IOPub, "status", parent.Header.Session, map[string]string{"execution_state": state})
	s.ParentHeader = parent.Header
	k.publish(s)
}

// alive fails as the Manager's kernel does once its process has died.
func (k *fakeKernel) alive() error {
	if k.ExecutionState() == "dead" {
		return fmt.Errorf("kernel %s: %w", k.id, kernels.ErrDead)
	}
	return nil
}

func (k *fakeKernel) Send(m *msg.Message) error {
	if err := k.alive(); err != nil {
		return err
	}
	k.mu.Lock()
	k.last = time.Now()
	k.mu.Unlock()
	k.status(m, "busy")
	switch m.Header.MsgType {
	case "kernel_info_request":
		k.publish(m.Reply("", "kernel_info_reply", map[string]any{
			"status": "ok", "protocol_version": msg.ProtocolVersion, "implementation": "fake",
			"language_info": map[string]string{"name": "python"},
		}))
	case "execute_request":
		var c struct {
			Code string `json:"code"`
		}
		if err := m.DecodeContent(&c); err != nil {
			return err
		}
		k.mu.Lock()
		k.count++
		n := k.count
		k.mu.Unlock()
		in := m.Reply(msg.IOPub, "execute_input", map[string]any{"code": c.Code, "execution_count": n})
		k.publish(in)
		var a, b int
		if _, err := fmt.Sscanf(strings.ReplaceAll(c.Code, " ", ""), "%d+%d", &a, &b); err != nil {
			k.publish(m.Reply(msg.IOPub, "error", map[string]any{"ename": "SyntaxError", "evalue": c.Code, "traceback": []string{}}))
			k.publish(m.Reply("", "execute_reply", map[string]any{"status": "error", "execution_count": n, "ename": "SyntaxError", "evalue": c.Code, "traceback": []string{}}))
			break
		}
		r := m.Reply(msg.IOPub, "execute_result", map[string]any{
			"execution_count": n, "data": map[string]string{"text/plain": fmt.Sprint(a + b)}, "metadata": map[string]any{},
		})
		if c.Code == "0+0" {
			r.Buffers = [][]byte{{0, 1, 2, 255}}
		}
		k.publish(r)
		k.publish(m.Reply("", "execute_reply", map[string]any{"status": "ok", "execution_count": n, "user_expressions": map[string]any{}}))
	default:
		k.publish(m.Reply("", strings.TrimSuffix(m.Header.MsgType, "_request")+"_reply", map[string]any{"status": "error", "ename": "UnknownMessage", "evalue": m.Header.MsgType, "traceback": []string{}}))
	}
	k.status(m, "idle")
	return nil
}

func (k *fakeKernel) Interrupt() error {
	if err := k.alive(); err != nil {
		return err
	}
	k.mu.Lock()
	k.interrupts++
	k.mu.Unlock()
	return nil
}

func (k *fakeKernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	k.restarts++
	k.count = 0
	k.state = "idle" // a dead kernel too, as the Manager's
	k.mu.Unlock()
	return nil
}

// die is an unexpected death: status dead reaches every client.
func (k *fakeKernel) die() {
	k.mu.Lock()
	k.state = "dead"
	k.mu.Unlock()
	k.publish(msg.New(msg.IOPub, "status", "", map[string]string{"execution_state": "dead"}))
}

// fakeContents is a map of path → model; enough to exercise the routes
// (the real store has its own tests). It keeps a notebook as the JSON put
// and gives it back as the store does, a *nbformat.Notebook, or as that
// JSON when it is no notebook.
type fakeContents struct {
	mu    sync.Mutex
	files map[string]json.RawMessage
	cps   map[string][]json.RawMessage
}

var errFakeNotFound = notFound("not found")

func newFakeContents() *fakeContents {
	return &fakeContents{files: map[string]json.RawMessage{
		"a.ipynb": json.RawMessage(`{"cells":[],"metadata":{},"nbformat":4,"nbformat_minor":5}`),
	}, cps: map[string][]json.RawMessage{}}
}

// model is the model of p, with content when content is not nil.
func (f *fakeContents) model(p string, content json.RawMessage) contents.Model {
	m := contents.Model{Name: path.Base(p), Path: p, Type: contents.TypeNotebook, Format: contents.FormatJSON,
		Writable: true, Created: time.Unix(0, 0), LastModified: time.Unix(0, 0)}
	if content != nil {
		if nb, err := nbformat.Read(bytes.NewReader(content)); err == nil {
			m.Content = nb
		} else {
			m.Content = content
		}
	}
	return m
}

func (f *fakeContents) Get(ctx context.Context, p string, q contentsQuery) (contents.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Contains(p, "..") {
		return contents.Model{}, httperr.New(httperr.Forbidden, "path %q escapes the root", p)
	}
	if p == "" {
		list := []contents.Model{}
		for name := range f.files {
			list = append(list, f.model(name, nil))
		}
		sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
		return contents.Model{Type: contents.TypeDirectory, Format: contents.FormatJSON, Content: list}, nil
	}
	c, ok := f.files[p]
	if !ok {
		return contents.Model{}, errFakeNotFound
	}
	if !q.Content {
		c = nil
	}
	return f.model(p, c), nil
}

func (f *fakeContents) Save(ctx context.Context, p string, body io.Reader) (contents.Model, bool, error) {
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.NewDecoder(body).Decode(&m); err != nil {
		return contents.Model{}, false, decodeError("bad model", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, existed := f.files[p]
	f.files[p] = m.Content
	return f.model(p, nil), !existed, nil
}

func (f *fakeContents) Create(ctx context.Context, dir string, body []byte) (contents.Model, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := path.Join(dir, fmt.Sprintf("Untitled%d.ipynb", len(f.files)))
	f.files[p] = json.RawMessage(`{}`)
	return f.model(p, nil), nil
}

func (f *fakeContents) Rename(ctx context.Context, p string, body []byte) (contents.Model, error) {
	var m struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return contents.Model{}, badRequest("bad body: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.files[p]
	if !ok {
		return contents.Model{}, errFakeNotFound
	}
	delete(f.files, p)
	f.files[m.Path] = c
	return f.model(m.Path, nil), nil
}

func (f *fakeContents) Delete(ctx context.Context, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.files[p]; !ok {
		return errFakeNotFound
	}
	delete(f.files, p)
	return nil
}

func (f *fakeContents) Checkpoints(ctx context.Context, p string) ([]contents.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []contents.Checkpoint{}
	for i := range f.cps[p] {
		out = append(out, contents.Checkpoint{ID: fmt.Sprint(i), LastModified: time.Unix(0, 0)})
	}
	return out, nil
}

func (f *fakeContents) CreateCheckpoint(ctx context.Context, p string) (contents.Checkpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.files[p]
	if !ok {
		return contents.Checkpoint{}, errFakeNotFound
	}
	f.cps[p] = append(f.cps[p], c)
	return contents.Checkpoint{ID: fmt.Sprint(len(f.cps[p]) - 1), LastModified: time.Unix(0, 0)}, nil
}

func (f *fakeContents) RestoreCheckpoint(ctx context.Context, p, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.cps[p] {
		if fmt.Sprint(i) == id {
			f.files[p] = c
			return nil
		}
	}
	return errFakeNotFound
}

func (f *fakeContents) DeleteCheckpoint(ctx context.Context, p, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cps[p]) == 0 {
		return errFakeNotFound
	}
	f.cps[p] = f.cps[p][:len(f.cps[p])-1]
	return nil
}
