// Package kernel is the kernel process as a library: Serve runs Starlark
// cells driving the engine over the pipe protocol of package wire
// (kernel/wire), with the devices its Options give (DefaultDevices: meta
// and cpu), so that another binary can serve a kernel on another device.
// It is the only package that runs the engine and Starlark; the server
// side, which starts and watches these processes across the process
// boundary, is package kernels (server/kernels).
//
// One Serve call owns one kernel: its globals, its allocators (one per
// device), its Emitter and the analyzer it feeds, and the engines, caches,
// tensors and tokenizers its cells made, all freed when Serve returns.
// Cells and lingering queries run one at a time on one goroutine; an
// interrupt and the 20 ms event flush run beside them.
//
// # Cells
//
// Cells are Starlark (go.starlark.net) with while loops, recursion,
// top-level control flow, sets and global reassignment; globals persist
// between cells; print becomes a stream output and a trailing expression
// the execute_result. One Thread runs each cell, with a step limit of
// MaxSteps; load is refused and there is no file or network access. An
// interrupt cancels the thread between steps and the engine's context
// between prefill chunks and decode steps, and the cell fails with
// KeyboardInterrupt. A failed cell's ename comes from the Go error under
// it first (an interrupt, an out-of-memory error, an undefined name), and
// from the message only for Starlark's own runtime errors, which have no
// type. Each cell is a cell scope inside the kernel's session scope (an
// engine's lifetime is a scope beside them, from engine() to close()), and
// every allocation made while it runs has the cell id (the
// execute_request's metadata cellId, else "exec-N") and the Starlark line
// in its site. Starlark has no ** operator: a cell using it fails with a
// SyntaxError that says so and names the pow call to write instead (for
// x = 10**9, "Starlark has no ** operator: use pow(10, 9) instead of
// 10**9").
//
// # Output
//
// Output is shaped in output.go, as ipykernel's output buffering does: a
// cell's print()s are merged into one stream message per 50 ms (and at the
// cell's end, and before any other output), so a loop of a million prints
// is a handful of messages. One stream message carries at most 8 MiB of
// text, ending at a rune, which stays under the pipe's 64 MiB frame after
// JSON escaping: a print of any size arrives, in parts. A result over the
// per-output cap (Options.MaxOutput, LINGER_MAX_OUTPUT, 16 MiB by
// default; linger serve --max-output) is replaced by its first KiB and a
// notice saying how large it was. Any message still over the frame (an
// error with a huge message) is replaced by a notice: an output by a
// stderr stream, a reply by an error reply (ename MessageTooLarge), so a
// cell never ends "ok" with its output gone.
//
// # Memory budget
//
// A kernel has a memory budget (Options.Memory, LINGER_KERNEL_MEMORY;
// linger serve --kernel-memory; by default three eighths of the machine's
// memory or of its cgroup's limit, DefaultMemory), which its Go heap and
// its cpu device's segments share (budget.go). The cpu device's capacity
// is the budget, and before each segment it asks what is left: of the
// budget beside the Go heap, and of the machine's available memory less
// 256 MiB; above that the allocation fails as on a full card, an
// OutOfMemoryError with its oom event. The Go runtime's soft limit
// (debug.SetMemoryLimit) is what the segments leave. A watchdog reads the
// kernel's memory every 10 ms: a cell that grows the live Go heap over
// the budget (a Starlark list of large strings, a tokenizer cache) is
// stopped between steps with MemoryError "kernel memory limit of N
// exceeded", and a mark on the timeline; a kernel still over it by a
// quarter (at least 512 MiB) after a collection exits with
// wire.ExitMemoryLimit, its reason on stderr, which the server makes the
// kernel's death reason. The kernel also raises its own oom_score_adj, so
// that should the machine run out anyway, Linux's OOM killer takes a
// kernel, not the server. The session's first event after its scope
// begins is the "memory_budget" counter.
//
// # Bindings
//
// Each cell gets the names below with its globals (not through
// starlark.Universe): the constructors engine, tensor, causal_mask and
// tokenizer, the modules mem, timeline and host (starlarkstruct.Module
// values, one file each), struct, and what Python users reach for that
// Starlark lacks (arith.go): pow(base, exp, mod=None), Python's (ints of
// any size, floats, an int modulus), and go.starlark.net's math module
// (math.sqrt, math.floor, math.pi, ...). The values they return are Go
// types (Engine, KVCache, Tensor, Result, Scheduler, ...) with a static
// method table each; the device names are those of Options.Devices, the
// first the default (meta and cpu in `linger kernel`; meta, cpu and cuda
// in `linger-cuda kernel`). Device "cuda" in a kernel without it is the
// error ErrNoCUDA, which names the kernelspec to pick ("Linger (CUDA)",
// linger-cuda), and the kernel stays up.
//
//	engine(model="qwen2-1.5b", device="meta"|"cpu", dtype=, memory_limit="16GiB", capacity="1TiB", kv_layout="contiguous"|"paged", seed=0) → Engine
//	  capacity= is the device's, given where the device is made (the first engine on it; mem.* and tensor() make the default one):
//	      meta's default is 80 GiB, or what the model needs when more (engine.MetaCapacity: its weights, a 131072-token KV cache
//	      and 16 GiB, rounded up to 16 GiB: "1280GiB" for deepseek-v3 in bf16), and a meta device of the default capacity grows
//	      when a later engine needs more; cpu's is the machine's memory, capped by the kernel's budget; cuda takes none (the card's).
//	      Another capacity for a device already made is an error that says what to do (restart, or memory_limit= for less), as is
//	      a memory_limit over meta's capacity (it names capacity=), and weights that do not fit on meta name the parameter to raise
//	  .generate(prompt_tokens=N | prompt="text", max_new_tokens=0, chunk_size=2048, keep_cache=False, mask=None, cache=None, top_k=, temperature=, seed=, on_error="raise"|"return", router_logits=False) → Result
//	      router_logits=True (a MoE model: deepseek-v3, small-moe) hands the cell each MoE layer's router logits in r.router_logits,
//	      one Tensor per MoE layer, [tokens run (prompt + max_new_tokens - 1), experts], category logits, expected to die with the
//	      cell, as tensor()'s are: kept past it (load-balancing statistics in a global) they linger; freed in it, nothing does
//	      with on_error="return" a failed call returns struct(error=text, oom=OOM or None, cache=the cache= given or None)
//	      instead of ending the cell (a Result answers .error "" and .oom None, so one test of r.error serves both);
//	      a caller's cache after a failed prefill holds the chunks done, which the cell resets or keeps;
//	      OOM: struct(requested, size, category, label, limit, reserved, allocated, device_free,
//	      live=[struct(category, bytes, blocks)], top_labels=[struct(label, category, bytes, blocks)])
//	      Result: .tokens .text .cache .cached_tokens .peak .prompt_tokens .chunks .stopped_at_eos .prefill_seconds .decode_seconds .tokens_per_second .allocated .router_logits (None unless asked)
//	  .forward(tokens, cache, mask=None) → Tensor: one forward pass of tokens (ids, or a count of synthetic ones)
//	      after those in cache, appending to it, attending through mask (a [len(tokens), cache.len+len(tokens)]
//	      tensor or view; None: causal by position); returns the last token's logits, which the caller frees
//	  .tokenize(text) → [ids]
//	  .kv_cache(max_tokens, expect="cell") → KVCache (.id .len .cap .bytes .layout .reset() .free())
//	  .workspace (.bytes .outstanding .acquire(rows) → WorkspaceGuard (.release() .released .per_call))
//	  .batch() → BatchContext (.alloc(shape, label=) .close() .bytes)
//	  .scheduler(max_batch=8, static=False, prefix_cache=False, prefix_capacity=0) → Scheduler
//	      (.submit(prompt_tokens=N | prompt="text" | tokens=[ids], max_new_tokens=, chunk_size=, keep_cache=False, on_error="raise"|"return")
//	      .step() .run() → [struct(id, result, error, oom)]: a failed request completes with its error, the others are served on;
//	      .pending .close() .prefix_stats() → struct(blocks, in_use, capacity, bytes, hits, misses, evictions) or None
//	      .clear_prefix_cache()); prefix_cache shares prompts' full 16-token blocks between requests, reference-counted,
//	      evicted least recently used past prefix_capacity blocks (0: never); the blocks are the engine's (expect engine)
//	  .close(), .config, .model, .device, .weight_bytes
//	  .config: layers hidden heads kv_heads vocab max_context, and for MLA and MoE (0 otherwise) kv_lora_rank qk_rope_head_dim
//	      experts active_experts shared_experts expert_ffn dense_layers moe_layers
//	tensor(shape, category="activation", expect="cell", label="tensor", dtype="f32", owner=None) → Tensor (.free() .view(*sizes) .slice(dim, start, end) .shape .bytes .live .label)
//	causal_mask(rows, cols, offset=0, label="mask", expect="cell", owner=None) → Tensor
//	  owner=e: the tensor lives as long as engine e (expect="engine", on e's device); expect="engine" without
//	  owner= is the one engine open's, and an error naming them when several are open or none is
//	tokenizer(cache_size=0) → Tokenizer (.encode(text, key=None) .stats() .clear()); each cache entry is a tokenizer_cache block
//	mem.stats() (.allocated .reserved .outside ...), mem.empty_cache(), mem.snapshot() (.limit .device_free .device_total .stats
//	  .segments=[struct(addr, size, pool, allocated, requested, blocks=[struct(addr, size, requested, allocated, category, label, site "cell:line")])]), mem.device() (.name .free .total .used .budget .budget_used)
//	mem.take_outside(bytes, label="outside", expect="cell") → OutsideMemory (.bytes .label .live .release()): device memory taken
//	  beside the caching allocator, as a library calling cudaMalloc directly; counted under the limit, on the
//	  device-used track and not on reserved; judged as a block is (category "outside"): lingering when the scope
//	  of kind expect it was taken in ends with it still taken, at the line that took it, held by what the walk finds
//	host.read_document(bytes, seed=0) → str: a synthetic text of that many bytes (4 KiB records
//	  "record NNNNNN title=... | body ...") built as one string on the Go heap; a slice s[i:j] of it shares
//	  its memory, so keeping any slice keeps the whole document
//	host.clone(s) → a copy of s in fresh memory (strings.Clone): keeps only its own bytes
//	  (what read_document and clone return is counted at the calling line while it lives: "go_heap_site N")
//	host.gc() → Go heap in use after a full collection (and a go_heap_inuse sample); host.heap() → it now
//	timeline.mark(label)
//	timeline.lingering() → lingering: the live lingering objects, largest first, a sequence (len, index,
//	  slice, for) of struct(addr, size, requested, category, label, site, holder, cell), site with its Go
//	  frames, cell the notebook line as the page names it ("In [3], cell 4, line 2"); .groups, one
//	  struct(holder, count, size, requested, cell, example, what, objects) per cause (wire.GroupHolders),
//	  most requested bytes first; .count, .size, .requested the totals. As a cell's result, a table by
//	  holder (see Results)
//	timeline.scope(kind, label, fn, *args, **kwargs) → fn(*args, **kwargs) run inside a scope of kind
//	  "layer"|"step"|"request"|"batch", ended on every path (a user's own batch loop gets batch scopes)
//	timeline.tracks(fn, *args, **kwargs) → struct(verdict, allocated_per_step, reserved_per_step,
//	  device_used_per_step, go_heap_per_step, go_heap_grows, allocated, reserved, device_used, go_heap, result):
//	  the analyzer's tracks verdict over fn's run alone (a fresh analyzer watches its events; the four
//	  values are the tracks' change over the run), e.g. one verdict per phase of a notebook
//	timeline.plot(cell=False, width=800, height=300) → plot: the kernel's memory over the session, the cell
//	  running it (cell=True) or the latest run of In [N] (cell=N), as a picture (see Results)
//	struct(**kwargs)
//	pow(base, exp, mod=None), math.sqrt(x), math.log(x, base), math.floor(x), math.pi, ... (go.starlark.net/lib/math)
//	help(obj): prints obj's signature and doc; help() lists the bindings
//	prof(fn, *args, **kwargs) → fn's result, its wall-clock profile shown as it returns (see Profiles)
//
// A binding's help (help.go) is laid out as IPython's pinfo: signature,
// docstring and type for a callable, type, string form and doc for a
// value. help(obj) prints it, an inspect_request answers it (text/plain),
// and a line "obj?" or "obj??" (or "?obj") by itself, which is no
// Starlark, is rewritten before the cell is parsed into a call that
// prints it ("Object `x` not found." for a name not bound), each line
// kept at its number; a ? in a string, a comment or brackets is left
// alone. complete_request and inspect_request count cursor_pos,
// cursor_start and cursor_end in code points (protocol 5.2).
//
// A long prefill shows a progress bar: a display_data output with a
// transient display_id, updated in place with update_display_data.
//
// # Profiles
//
// A cell whose first line is %%prof (alone on it) runs under fgprof
// (github.com/felixge/fgprof: every goroutine sampled 99 times a second,
// running or waiting, so a prefill's wait on its matmul workers counts as
// its compute does), and so does prof(fn, *args, **kwargs), which
// returns fn's result. The %%prof line is made blank before the cell is
// parsed, so tracebacks and allocation sites keep the cell's line
// numbers. As the cell (or fn) ends, failed or not, one display_data
// output shows the profile (prof.go, flame.go): text/plain, the wall
// time, samples, the cell's goroutine time and the share of it waiting,
// and the top five functions; image/svg+xml, a static icicle flame graph
// (root on top, 1200 px wide, frames under a pixel or past 2000 left to
// their caller, each with a <title>: function, file:line, seconds, share)
// on its own light background; text/html, the same SVG, a link that
// downloads the .pprof file fgprof wrote (cell-In3.pprof, prof-fn-1.pprof;
// a data: URL) and a table of the top ten functions; and
// application/vnd.linger.flamegraph+json, the tree for Linger's page,
// which draws it with d3-flame-graph (click or Enter zooms, arrow keys
// move between frames). The .pprof file is fgprof's whole profile; the
// graph, table and text are the cell's goroutines alone: those whose
// stack holds Starlark's interpreter, the engine, or the cell loop. The
// kernel's own (the flusher, the watchdog, the pipe's reader) are left
// out and their time said; fgprof reads runtime.GoroutineProfile, whose
// records carry no pprof labels (a goroutine cannot be picked by label)
// and at most 32 frames. The interpreter's frames are folded into one,
// "(interpreter frames folded)", as the exports fold them, whose own time
// is the interpreter running the cell's Starlark; the runtime's parking
// frames are cut from a waiting stack, so that its time is the waiting
// function's (sync.(*WaitGroup).Wait, drawn blue), and the preemption's
// from a running one. A run shorter than fgprof's period (about 10 ms)
// has no samples and says so. The server's /debug/fgprof profiles the
// server process, whatever its kernels do.
//
// # Lifetimes
//
// A cache a request makes (generate without cache=, keep_cache=True) is
// expected to die with that request. A cache a cell makes with kv_cache
// is the notebook's, for the lifetime it declares (expect=, "cell" by
// default): each block it adds belongs to the scopes around the engine
// call that adds it (generate(cache=c), forward), never to the request
// and step scopes the call opens inside itself, and is expected to die
// with the innermost scope of that kind there: for expect="request" the
// user's own timeline.scope("request", ...) around the calls (several
// generate calls of one multi-turn exchange or retry loop share it),
// else the cell that runs them; the cell for expect="cell"; the session
// for expect="session". So a cache made in a setup cell and filled by
// later cells is judged in the cells that fill it, not by the setup cell,
// long ended.
//
// A cell's end ends nothing a cell left running, and nothing stays around
// the next cell either: the scopes still open inside a cell when it ends
// (a scheduler's requests admitted and not finished, after a step() or
// an interrupted run()) are detached from it (event.Emitter.End). They
// stay open, so a later cell that steps the scheduler on serves the same
// requests, whose blocks are still judged by their request's end; but
// the next cell begins inside the session, never inside a stale request,
// so what it makes is judged by its own scopes. A request still running
// when the kernel shuts down holds its cache to the end: the teardown
// closes the schedulers (their requests' scopes end, their caches are
// freed) after it began, so those caches are leaks, and ends any other
// scope left open. The retention walk reaches a scheduler's running
// requests: global sc → Scheduler#1 → request#3 → KVCache#7 → layer[0].k
// (request#N by the id submit returned).
//
// When the kernel shuts down it opens the session's teardown scope
// (event.Emitter.BeginTeardown), records the holder of every lingering
// object (see Who holds it), frees there what the session left (the
// tokenizers' caches, the tensors tensor() and causal_mask() made, the
// memory mem.take_outside took and nobody gave back, the schedulers'
// running requests, the engines with their caches, weights and
// workspaces), ends any scope a cell left open, ends the teardown, then
// ends the session. What was declared to live as long as the session ends with
// it and is never reported; what was already lingering (a cache a global
// held to the end) stays a leak, though the teardown frees it.
//
// There is one allocator per device per kernel process: the first engine
// (or tensor) picks the device and every later engine on it shares the
// allocator, so mem.stats() covers them all; an engine on another device
// gets an allocator of its own. mem.* and tensor() use the first.
//
// # Counters
//
// The kernel samples these counters through its Emitter, each emitted only
// when its value changed: "device_used", the devices' own view (MemInfo
// total minus free, summed over the kernel's devices: the allocators'
// segments plus memory taken outside them), after every allocator call
// that took or returned a segment (alloc.Options.OnSegments; nothing on
// other allocations); and "go_heap_inuse", the Go heap in use read from
// runtime/metrics as /memory/classes/heap/objects:bytes plus
// /memory/classes/heap/unused:bytes, which is exactly runtime.MemStats'
// HeapInuse (Prometheus' go_memstats_heap_inuse_bytes, the figure the
// field report watched) without ReadMemStats' stop-the-world. It is
// sampled inside each cell scope at its start and end, after host.gc(),
// and, while a cell runs, at every event flush (20 ms) when it moved by
// 64 KiB or more. Between cells it is not sampled: what moves the heap then
// is the kernel serving Linger itself (a report, who holds what), and an
// idle kernel's trace stays quiet. The analyzer and the timeline follow
// both.
//
// Beside go_heap_inuse, at the same instants, "go_heap_site N" says how
// many bytes of the host buffers site N made are still alive
// (hostsites.go): host.read_document and host.clone note each string they
// return with the notebook place that called them and a cleanup
// (runtime.AddCleanup) that takes it off when the collector finds it
// unreachable, so a slice that keeps a document whole keeps it counted at
// the line that read it. host.gc() waits for the cleanups of what its
// collection found dead before it samples. Buffers under 64 KiB are
// sampled, as Go's heap profile samples. What the interpreter builds
// itself (concatenation, join, formatting) is not seen.
//
// # Who holds it
//
// For each live lingering object (judged by an analyze.Analyzer fed by the
// kernel's own event stream) the kernel walks, breadth first, from the
// globals in name order, then from the registries (engines, KV caches the
// engine adopted, tokenizer caches, tensors no value refers to) through
// list, tuple, dict and set elements, struct fields, closures' captured
// variables and default values, and the binding values, to the block, and
// names the first path found, e.g.
//
//	global last_cache → KVCache#3 → layer[5].k
//	global d["runs"][1] → KVCache#3 → layer[0].k
//	global h → closure hook captures c → KVCache#3 → layer[0].k
//
// timeline.lingering() returns these paths in a cell (with each object's
// size, its requested bytes and its allocator block) and, as a cell's
// result, says them once per cause in a table (below); Kernel.Lingering
// asks a live kernel from the server, and linger run says them once per
// cause too (wire.GroupHolders, kernels.GroupHolders on the server side:
// "global stop_state[*]", 24 objects). The walk costs time in the number of
// values reachable from the roots, and runs only when asked, or when the
// trace records holders: at the end of a cell in which objects newly
// lingered (for those objects, the analyzer's OnLinger, the walk ending
// once it has named them all) and when the teardown begins (for every
// lingering object), the kernel sends them (wire.OpHolders, at most 4096 a
// message) after the events they speak of, and the server keeps them in
// the trace as holders frames (timeline.Holders), so that a saved trace
// names its holders as the live kernel did. A cell that leaves nothing
// newly lingering pays nothing for it; one that does, about 6 ms with
// 11,000 values reachable and 1,000 objects lingering
// (BenchmarkHoldersAtCellEnd).
//
// # Results
//
// A cell's trailing value is its execute_result: its String as text/plain,
// or for a value that renders itself (a richValue) its mime bundle.
// timeline.lingering() is one: one row per holder (the cause that keeps
// the objects alive) with its objects' count, requested and allocated
// bytes and the cell line that made the most of them, biggest first, and
// a total row; text/plain is an aligned table for linger run and clients
// without HTML, text/html an accessible table (caption, scoped headers)
// with each holder's objects behind a <details> disclosure, one line each
// (label, category, size, cell line). Neither shows Go frames (they stay
// in each object's site). The first 50 holders are shown and, in a
// disclosure, a holder's first 50 objects, each list with "… and K more":
// 280 lingering tensors are an 8 KB result, where their list's repr was
// 300 KB. A text/plain over the kernel's per-output cap is cut with a
// notice; a larger HTML is left out.
//
// timeline.plot() is another, for frontends without Linger's timeline
// (JupyterLab, VS Code, nbconvert): image/svg+xml and image/png of the
// kernel's memory over the session or a cell, and a summary line as
// text/plain ("memory over In [4]: peak 3.2 GiB allocated, 448 lingering
// objects (227.5 MiB)"). It is drawn when shown, by package timeline/plot,
// from the plot.Series the sink feeds with every event: a bounded history
// of live bytes by category, allocated, reserved and device used (the
// session's points and the last two cells' finer ones, merging in pairs
// as they fill: about 1 MiB at most), the cells' spans and the idle
// stretches; the lingering objects come from the kernel's analyzer. Drawn
// when the cell's result is sent, after its scope ended, a plot that ends
// a cell marks what the cell left lingering. In a kernel a Jupyter
// frontend started, whose ZeroMQ bridge writes the trace and tells the
// kernel where (Options.TracePath), it is also text/html: the picture,
// its summary and a link to the trace in the timeline of a running linger
// serve that lists the kernels' traces (package serverinfo), or where the
// trace is when none runs.
package kernel
