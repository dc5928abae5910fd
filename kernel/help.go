package kernel

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
)

// Help: what help(obj), obj? and an inspect_request (Shift+Tab on the
// page) show of a binding, laid out as IPython's pinfo: for a callable
// its signature, docstring and type; for another value its type, its
// string form and its type's doc.

// A bindingDoc is the help of one binding: params is its parameter list
// and what it returns, as written after its name ("(text) → [ids]");
// text is its docstring.
type bindingDoc struct {
	params, text string
}

// bindingDocs are keyed by the name a builtin carries (engine,
// mem.stats), a method by its receiver's type and name (Engine.generate),
// a value's type by its name (Engine), a module by its name (mem).
var bindingDocs = map[string]bindingDoc{
	"engine": {`(model="qwen2-1.5b", device="meta", dtype=None, memory_limit=None, capacity=None, kv_layout="contiguous", seed=0) → Engine`,
		`An instrumented inference engine with its weights on a device.
A decoder-only transformer (Llama / Qwen / DeepSeek family) whose every
allocation is an event on the timeline. device is the kernel's first device
by default (meta: exact accounting, no compute; cpu: real float32 compute);
dtype, the model's by default. memory_limit ("16GiB") becomes the
allocator's limit; capacity= is the device's, given where the device is made
(the first engine on it). kv_layout: "contiguous" or "paged".`},
	"tensor": {`(shape, category="activation", expect="cell", label="tensor", dtype="f32", owner=None) → Tensor`,
		`A tensor on the kernel's first allocator.
It is expected to die with the scope of kind expect ("cell", "request",
"engine", "session"): kept past it, it lingers. owner=e ties it to engine e.`},
	"causal_mask": {`(rows, cols, offset=0, label="mask", expect="cell", dtype="f32", owner=None) → Tensor`,
		`A causal attention mask of rows × cols.
owner=e: it lives as long as engine e (expect="engine").`},
	"tokenizer": {`(cache_size=0) → Tokenizer`,
		`The default byte-level BPE tokenizer with an encode cache of its own.
The cache holds cache_size entries (0: no limit), each a tokenizer_cache
block on the timeline.`},
	"struct": {`(**kwargs) → struct`, `A struct whose fields are the keyword arguments.`},
	"pow": {`(base, exp, mod=None)`,
		`Python's pow: base to the power exp, modulo mod if given.
Ints of any size and floats. Starlark has no ** operator: write pow(10, 9)
for 10**9.`},
	"help": {`(obj) → None`,
		`Prints the signature and doc of obj, as obj? and Shift+Tab show them.
help() lists the bindings.`},
	"prof": {`(fn, *args, **kwargs)`,
		`Runs fn(*args, **kwargs) under fgprof; returns fn's result.
fn's wall-clock profile (on-CPU and off-CPU time of the cell's goroutines,
sampled 99 times a second) is shown as it returns, as %%prof on a cell's
first line shows the cell's: a flame graph, the top functions and the
.pprof file to download (go tool pprof -http=: FILE).`},
	"math": {"", `go.starlark.net's math module.
math.sqrt(x), math.log(x, base), math.floor(x), math.pi, ...`},

	"mem": {"", `The kernel's first allocator and its device.
mem.stats(), mem.empty_cache(), mem.snapshot(), mem.device(),
mem.take_outside(bytes, label="outside", expect="cell").`},
	"mem.stats": {`() → struct(allocated, peak_allocated, reserved, peak_reserved, active, requested, num_allocs, num_frees, num_ooms, by_category, outside)`,
		`The first allocator's statistics, as torch.cuda.memory_stats() has them.`},
	"mem.empty_cache": {`() → None`, `Gives every allocator's cached segments back to the device.`},
	"mem.snapshot": {`() → struct(limit, device_free, device_total, stats, segments)`,
		`The allocator's segments and blocks.
segments=[struct(addr, size, pool, allocated, requested, blocks=[struct(addr,
size, requested, allocated, category, label, site)])].`},
	"mem.device": {`() → struct(name, free, total, used, budget, budget_used)`, `The device's own view of its memory.`},
	"mem.take_outside": {`(bytes, label="outside", expect="cell") → OutsideMemory`,
		`Takes device memory beside the caching allocator.
As a library calling cudaMalloc directly: counted under the limit and on the
device-used track, not on reserved; lingering when the scope of kind expect
ends with it still taken.`},

	"host": {"", `The kernel's own Go heap.
host.read_document(bytes, seed=0), host.clone(s), host.gc(), host.heap().`},
	"host.read_document": {`(bytes, seed=0) → str`,
		`A synthetic text of that many bytes, one string on the Go heap.
A slice of it shares its memory, so keeping any slice keeps the whole
document.`},
	"host.clone": {`(s) → str`, `A copy of s in fresh memory (strings.Clone): keeps only its own bytes.`},
	"host.gc":    {`() → int`, `Runs a full collection and returns the Go heap in use after it.`},
	"host.heap":  {`() → int`, `The Go heap in use now.`},

	"timeline": {"", `The trace: marks, lingering objects, scopes, tracks and pictures.
timeline.mark(label), timeline.lingering(), timeline.scope(kind, label, fn,
*args, **kwargs), timeline.tracks(fn, *args, **kwargs), timeline.plot().`},
	"timeline.mark": {`(label) → int`, `Puts a mark on the timeline; returns its sequence number.`},
	"timeline.lingering": {`() → lingering`,
		`The live lingering objects, largest first.
Each a struct(addr, size, requested, category, label, site, holder, cell);
with .groups (one per cause), .count, .size, .requested. As a cell's
result, a table by holder.`},
	"timeline.scope": {`(kind, label, fn, *args, **kwargs)`,
		`Runs fn(*args, **kwargs) inside a scope of kind; returns fn's result.
kind is "layer", "step", "request" or "batch"; the scope ends on every path.`},
	"timeline.tracks": {`(fn, *args, **kwargs) → struct(verdict, allocated_per_step, reserved_per_step, device_used_per_step, go_heap_per_step, go_heap_grows, allocated, reserved, device_used, go_heap, result)`,
		`The analyzer's tracks verdict over fn's run alone.`},
	"timeline.plot": {`(cell=False, width=800, height=300) → plot`,
		`A picture of the kernel's memory, for notebooks without Linger's timeline.
Over the session; cell=True: the cell running it; cell=N: the latest run of
In [N]. Live bytes stacked by category (at each column's peak), the
allocated, reserved and device-used tracks, cells banded, idle time
collapsed, lingering objects marked where they were allocated. As a cell's
result: image/svg+xml, image/png and a summary line; drawn when shown, so
a plot that ends a cell includes what lingered when it ended.`},
	"plot": {"", `A picture of the kernel's memory, made by timeline.plot().
As a cell's result an SVG, a PNG and its summary line; str() is the summary.`},

	"Engine": {"", `A model on a device with its weights allocated, made by engine().
Methods: generate, forward, tokenize, kv_cache, batch, scheduler, close;
attributes: config, device, model, weight_bytes, workspace.`},
	"Engine.generate": {`(prompt_tokens=0, prompt="", max_new_tokens=0, chunk_size=2048, keep_cache=False, mask=None, cache=None, top_k=0, temperature=0.0, seed=0, on_error="raise", router_logits=False) → Result`,
		`Runs one request: a chunked prefill and max_new_tokens decode steps.
The prompt is prompt_tokens synthetic tokens or the text prompt. cache=
continues a KVCache; keep_cache=True keeps the request's cache in the
Result. on_error="return" returns struct(error, oom, cache) instead of
failing the cell.`},
	"Engine.forward": {`(tokens, cache, mask=None) → Tensor`,
		`One forward pass of tokens after those in cache, appending to it.
tokens are ids, or a count of synthetic ones; returns the last token's
logits, which the caller frees.`},
	"Engine.tokenize": {`(text) → [ids]`, `The token ids of text.`},
	"Engine.kv_cache": {`(max_tokens, expect="cell") → KVCache`,
		`A KV cache for max_tokens tokens.
It is expected to die with the scope of kind expect.`},
	"Engine.batch": {`() → BatchContext`, `A batch context whose scratch lives until close().`},
	"Engine.scheduler": {`(max_batch=8, static=False, prefix_cache=False, prefix_capacity=0) → Scheduler`,
		`A dynamic-batching scheduler.
prefix_cache shares prompts' full 16-token blocks between requests.`},
	"Engine.close": {`() → None`, `Frees the engine's caches, weights and workspace.`},

	"KVCache": {"", `A KV cache.
Attributes: id, len, cap, bytes, layout; methods: reset(), free().`},
	"KVCache.reset": {`() → None`, `Empties the cache, keeping its memory.`},
	"KVCache.free":  {`() → None`, `Frees the cache's memory.`},

	"Tensor": {"", `A tensor.
Attributes: shape, bytes, dtype, label, live, is_view; methods: free(),
view(*sizes), slice(dim, start, end).`},
	"Tensor.free":  {`() → None`, `Frees the tensor's block.`},
	"Tensor.view":  {`(*sizes) → Tensor`, `A view of the tensor with another shape, sharing its memory.`},
	"Tensor.slice": {`(dim, start, end) → Tensor`, `A view of elements start to end along dim, sharing its memory.`},

	"Tokenizer": {"", `A tokenizer with an encode cache.
Methods: encode(text, key=None), stats(), clear().`},
	"Tokenizer.encode": {`(text, key=None) → [ids]`, `The ids of text, cached under key (default: the text).`},
	"Tokenizer.stats":  {`() → struct`, `The cache's entries, bytes, hits and misses.`},
	"Tokenizer.clear":  {`() → None`, `Empties the cache.`},

	"Scheduler": {"", `A dynamic-batching scheduler.
Methods: submit(...), step(), run(), close(), prefix_stats(),
clear_prefix_cache(); attribute: pending.`},
	"Scheduler.submit": {`(prompt_tokens=0, max_new_tokens=0, chunk_size=2048, prompt="", tokens=None, keep_cache=False, on_error="raise") → int`,
		`Queues a request; returns its id.`},
	"Scheduler.step":  {`() → [struct(id, result, error, oom)]`, `Runs one step of the batch; returns the requests completed.`},
	"Scheduler.run":   {`() → [struct(id, result, error, oom)]`, `Runs until every request completed.`},
	"Scheduler.close": {`() → None`, `Ends the scheduler's running requests and frees their caches.`},
	"Scheduler.prefix_stats": {`() → struct(blocks, in_use, capacity, bytes, hits, misses, evictions)`,
		`The prefix cache's statistics, or None without one.`},
	"Scheduler.clear_prefix_cache": {`() → None`, `Empties the prefix cache.`},

	"Result": {"", `One request's result.
Attributes: tokens, text, cache, cached_tokens, peak, prompt_tokens, chunks,
stopped_at_eos, prefill_seconds, decode_seconds, tokens_per_second,
allocated, router_logits, error, oom.`},
	"Workspace": {"", `An engine's persistent attention workspace.
Attributes: bytes, outstanding; method: acquire(rows).`},
	"Workspace.acquire": {`(rows) → WorkspaceGuard`, `Takes the workspace for rows rows until the guard is released.`},
	"WorkspaceGuard": {"", `A hold on the workspace.
Attributes: released, per_call; method: release().`},
	"WorkspaceGuard.release": {`() → None`, `Gives the workspace back.`},
	"BatchContext": {"", `A batch's scratch.
Attribute: bytes; methods: alloc(shape, label=), close().`},
	"BatchContext.alloc": {`(shape, label="batch_scratch") → Tensor`, `Scratch for the batch, freed by close().`},
	"BatchContext.close": {`() → None`, `Frees the batch's scratch.`},
	"OutsideMemory": {"", `Device memory taken beside the allocator.
Attributes: bytes, label, live; method: release().`},
	"OutsideMemory.release": {`() → None`, `Gives the memory back.`},
}

// universeDocs are the signatures of Starlark's own builtins.
var universeDocs = map[string]string{
	"abs": "(x)", "all": "(x)", "any": "(x)", "bool": "(x=False)", "bytes": "(x)", "chr": "(i)",
	"dict": "(pairs=(), **kwargs)", "dir": "(x)", "enumerate": "(x, start=0)", "fail": `(*args, sep=" ")`,
	"float": "(x)", "getattr": "(x, name, default=None)", "hasattr": "(x, name)", "hash": "(x)",
	"int": "(x, base=10)", "len": "(x)", "list": "(x=[])", "max": "(*args, key=None)", "min": "(*args, key=None)",
	"ord": "(s)", "print": `(*args, sep=" ")`, "range": "(start, stop, step=1)", "repr": "(x)",
	"reversed": "(x)", "set": "(x=[])", "sorted": "(x, key=None, reverse=False)", "str": "(x)",
	"tuple": "(x=())", "type": "(x)", "zip": "(*args)",
}

// helpBuiltin is help(obj): it prints what helpText says of obj, and
// help() the bindings every cell sees.
var helpBuiltin = starlark.NewBuiltin("help", func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "obj?", &v); err != nil {
		return nil, err
	}
	if v == nil {
		thread.Print(thread, overview())
		return starlark.None, nil
	}
	thread.Print(thread, helpText("", v, sessionOf(thread).cellCounts))
	return starlark.None, nil
})

// pinfoBuiltin is what a line "obj?" runs (see rewritePinfo): the help
// of the name as the cell sees it at that line, or IPython's "Object `x`
// not found." for a name that is not bound.
var pinfoBuiltin = starlark.NewBuiltin(pinfoVar, func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &name); err != nil {
		return nil, err
	}
	// The cell's globals assigned so far are its module's: the session's
	// globals get them only when the cell ends.
	var scopes []starlark.StringDict
	if fn, ok := thread.DebugFrame(1).Callable().(*starlark.Function); ok {
		scopes = append(scopes, fn.Globals())
	}
	s := sessionOf(thread)
	v := lookup(name, append(scopes, s.globals)...)
	if v == nil {
		thread.Print(thread, fmt.Sprintf("Object `%s` not found.", name))
		return starlark.None, nil
	}
	thread.Print(thread, helpText(name, v, s.cellCounts))
	return starlark.None, nil
})

// pinfoVar is the builtin a line "obj?" becomes a call of.
const pinfoVar = "__linger_pinfo__"

// overview is help(): one line per binding a cell sees.
func overview() string {
	var b strings.Builder
	b.WriteString("Bindings (help(obj) or obj? for one):\n")
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range predeclared {
			if !strings.HasPrefix(n, "__") && !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		d := bindingDocs[n]
		first, _, _ := strings.Cut(d.text, "\n")
		fmt.Fprintf(&b, "  %-12s %s\n", n, first)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// docKey is the key of v's entry in bindingDocs, and the name it is
// known by.
func docKey(v starlark.Value) string {
	switch v := v.(type) {
	case *starlark.Builtin:
		if r := v.Receiver(); r != nil {
			return r.Type() + "." + v.Name()
		}
		return v.Name()
	case *starlark.Function:
		return v.Name()
	case *starlarkstruct.Module:
		return v.Name
	}
	return v.Type()
}

// helpText is the help of v, which the cell named name ("" for help's
// argument: then v's own name), as IPython's pinfo lays it out; counts
// are the session's, to name the cell a function was defined in as its
// traceback would.
func helpText(name string, v starlark.Value, counts map[string]int) string {
	key := docKey(v)
	if name == "" {
		name = key
	}
	var fields [][2]string
	switch fn := v.(type) {
	case *starlark.Builtin:
		d, ok := bindingDocs[key]
		params := d.params
		if !ok && fn.Receiver() == nil {
			params = universeDocs[key]
		}
		if params == "" {
			params = "(...)"
		}
		fields = append(fields, [2]string{"Signature", name + params}, [2]string{"Docstring", docstring(d.text)},
			[2]string{"Type", "builtin_function_or_method"})
	case *starlark.Function:
		fields = append(fields, [2]string{"Signature", name + signature(fn)}, [2]string{"Docstring", docstring(fn.Doc())},
			[2]string{"Type", "function"})
		if pos := fn.Position(); pos.Line > 0 {
			fields = append(fields, [2]string{"Defined", fmt.Sprintf("Cell %s, line %d", tracebackCell(pos.Filename(), counts), pos.Line)})
		}
	case *starlarkstruct.Module:
		fields = append(fields, [2]string{"Type", "module"}, [2]string{"Docstring", docstring(bindingDocs[key].text)},
			[2]string{"Members", strings.Join(fn.AttrNames(), ", ")})
	default:
		fields = append(fields, [2]string{"Type", v.Type()}, [2]string{"String form", v.String()})
		if d, ok := bindingDocs[key]; ok {
			fields = append(fields, [2]string{"Docstring", d.text})
		} else if ha, ok := v.(starlark.HasAttrs); ok {
			fields = append(fields, [2]string{"Attributes", strings.Join(ha.AttrNames(), ", ")})
		}
	}
	return layout(fields)
}

func docstring(s string) string {
	if s == "" {
		return "<no docstring>"
	}
	return s
}

// layout writes fields as IPython does: labels padded to one width, a
// value of several lines under its label.
func layout(fields [][2]string) string {
	w := 0
	for _, f := range fields {
		w = max(w, len(f[0])+1)
	}
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteByte('\n')
		}
		if strings.Contains(f[1], "\n") {
			b.WriteString(f[0] + ":\n" + f[1])
			continue
		}
		fmt.Fprintf(&b, "%-*s %s", w, f[0]+":", f[1])
	}
	return b.String()
}

// signature is a Starlark function's parameter list as it was written.
func signature(fn *starlark.Function) string {
	n, kwonly := fn.NumParams(), fn.NumKwonlyParams()
	if fn.HasVarargs() {
		n--
	}
	if fn.HasKwargs() {
		n--
	}
	param := func(i int) string {
		p, _ := fn.Param(i)
		if d := fn.ParamDefault(i); d != nil {
			p += "=" + d.String()
		}
		return p
	}
	var ps []string
	for i := 0; i < n-kwonly; i++ {
		ps = append(ps, param(i))
	}
	i := n
	if fn.HasVarargs() {
		p, _ := fn.Param(i)
		ps = append(ps, "*"+p)
		i++
	} else if kwonly > 0 {
		ps = append(ps, "*")
	}
	for j := n - kwonly; j < n; j++ {
		ps = append(ps, param(j))
	}
	if fn.HasKwargs() {
		p, _ := fn.Param(i)
		ps = append(ps, "**"+p)
	}
	return "(" + strings.Join(ps, ", ") + ")"
}

// pinfoLine is a line IPython reads as a help request: a dotted name with
// ? or ?? after it (or before it), alone on its line.
var pinfoLine = regexp.MustCompile(`^([ \t]*)(\?{0,2})([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(\?{0,2})[ \t]*$`)

// rewritePinfo turns each line "obj?" or "obj??" (or "?obj") of code
// into a call that prints obj's help, as IPython does: such a line is
// no Starlark. A line inside a string, a comment or brackets is left as
// it is, and every line keeps its number.
func rewritePinfo(code string) string {
	if !strings.Contains(code, "?") {
		return code
	}
	lines := strings.SplitAfter(code, "\n")
	var st lexState
	changed := false
	for i, line := range lines {
		if st.quote == "" && st.depth == 0 {
			body := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
			if m := pinfoLine.FindStringSubmatch(body); m != nil && (m[2] == "") != (m[4] == "") {
				lines[i] = fmt.Sprintf("%s%s(%q)%s", m[1], pinfoVar, m[3], line[len(body):])
				changed = true
				continue
			}
		}
		st.scan(line)
	}
	if !changed {
		return code
	}
	return strings.Join(lines, "")
}

// lexState is what a line of Starlark leaves open for the next: a string
// (its quote: three of them for a long one) or brackets.
type lexState struct {
	quote string
	depth int
}

// scan moves the state over line, newline included.
func (st *lexState) scan(line string) {
	for i := 0; i < len(line); i++ {
		c := line[i]
		if st.quote != "" {
			switch {
			case c == '\\':
				i++ // what it escapes, a newline included
			case strings.HasPrefix(line[i:], st.quote):
				i += len(st.quote) - 1
				st.quote = ""
			case c == '\n' && len(st.quote) == 1:
				st.quote = "" // an unclosed short string: the parser says so
			}
			continue
		}
		switch c {
		case '#':
			return
		case '"', '\'':
			q := string(c)
			if strings.HasPrefix(line[i:], strings.Repeat(q, 3)) {
				q = strings.Repeat(q, 3)
			}
			st.quote = q
			i += len(q) - 1
		case '(', '[', '{':
			st.depth++
		case ')', ']', '}':
			st.depth = max(0, st.depth-1)
		}
	}
}
