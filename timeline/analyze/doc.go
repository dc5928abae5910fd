// Package analyze judges a memory trace: which objects outlived the scope
// they were expected to die with (lingering), which categories and sites
// grow step after step, which sites re-allocate the same buffer every step
// (duplicates), what was alive at the peak, how the allocator's and the
// device's tracks diverge, and what changed between two traces (Diff).
//
// One incremental Analyzer serves a trace file and a live stream alike:
// feed it events in order with Add and ask for a Report at any time. Run
// does that over a whole trace. Memory is bounded by the live objects, the
// open scopes, the distinct sites and labels and the capped lists of a
// report, never by the number of events.
//
// # Lingering
//
// Every allocation with an expectation (Event.Expect != ScopeNone) has an
// owner: among the scopes open when it was made, walking outwards from its
// own scope, the innermost whose kind equals Expect, or failing that the
// innermost whose kind is larger. When the owner ends, the object becomes
// lingering from that instant. Freed later, it is a late free, with its
// delay in nanoseconds, events and step ends; still alive at the last event,
// it is leaked. Options.OnLinger and Options.OnLateFree tell each verdict as
// it is made, for views that mark objects one by one (the timeline, the
// exports): an object that lingered and was never freed late is leaked.
//
// Byte figures that are sums of objects' blocks come twice: as requested
// (the bytes the code asked for) and as the allocator's blocks (rounded up
// to 512 B, or a whole cached block when what was left was too small to
// split). That is every lingering figure, the peak's shares (Share.Requested
// beside Share.Bytes) and Peak.Requested, a duplicates family's sizes,
// total, saving and most alive at once (the *Requested fields), and a
// growth's slope and first and last samples (RequestedPerStep,
// RequestedPerSecond, FirstRequested, LastRequested: the same fit over the
// bytes requested; the growth rule is applied to the blocks). The text
// report gives the requested bytes first and the blocks beside them when
// they read differently: "11.3 MiB (12.0 MiB allocated)". Track values
// (allocated, reserved, device used and the Go heap over time: Tracks,
// Peak.Bytes, the allocated track at its highest) are what the allocator
// and the device hold and have no requested figure: they stay as they are.
//
// Memory taken outside the caching allocator (a segment of
// event.PoolOutside made with an expectation, as mem.take_outside makes)
// is an object too, in category "outside": owned, lingering, late-freed
// and leaked as a block is, and counted in the lingering totals and in
// growth (a site that takes more outside memory step after step grows);
// but not in the allocator's peak, its shares or the allocated track,
// which are the allocator's. Its segment is applied to the tracks as
// memstate says (device used, not reserved).
//
// A report of a trace that recorded who held its objects (Names that
// implement HolderNames: a live kernel's holders kept as holders frames)
// gives each listed Object its HeldBy, and lists in Lingering.Held every
// leak with its holder, those the teardown freed and those never freed,
// whatever MaxObjects lists in detail.
//
// A scope flagged event.ScopeFlagHandoff (an imported PyTorch snapshot's
// steps) hands what it leaves alive to the next scope of its kind: its
// objects linger only if they are still alive when the second scope of
// that kind to begin after it begins, from that instant, as objects of
// the scope that made them. A step's output that the next step reads,
// and that is dropped when the caller takes the next step's output
// (`logits = model(x)` rebinds after the call returns), is not
// lingering; a tensor kept past the next step is. What the last two such
// scopes leave alive is never judged: no scope came to take it (the
// session's teardown, if one begins, judges it then).
//
// An allocation whose scopes hold none of its kind or larger still gets an
// owner, so that it is judged: the latest open scope of its kind anywhere
// (an engine's scope, which is beside the cells, not around them), else
// the outermost scope open around it (else, when its own scope had
// already ended, the outermost scope open). Only an allocation made with
// no scope open at all (a trace without scopes) never lingers.
//
// # Teardown
//
// A scope flagged event.ScopeFlagTeardown is the session's teardown: the
// kernel shutting down frees what the session left. When it begins, the
// objects the scopes around it own without being expected to die with
// them (a request's cache recorded in a cell that had ended, a tensor
// whose engine had closed) become lingering: the session is over for
// them. A free inside the teardown does not end a lingering object's
// story: it was still held when the session ended, so it stays leaked,
// whoever frees it afterwards. Objects declared to live as long as the
// session (or an engine the teardown closes) are freed there normally and
// never reported.
//
// Scopes smaller than the session that are still open when the teardown
// begins, outside its chain of scopes (a scheduler's requests that a cell
// left running, which the Emitter detaches when the cell ends), will
// never end before the session: everything they own lingers then.
//
// A cell (or the teardown) is never inside a smaller scope: one recorded
// inside a request (a trace from before the Emitter detached the scopes a
// cell left open, in which the next cell began inside a stale request) is
// taken to be inside the nearest scope around it of its own kind or
// larger, so that the stale request owns nothing the later cell makes.
//
// Where scopes nest properly this is exactly "when a scope of kind K ends,
// every live object allocated inside it with Expect ≤ K lingers". It differs
// where the recorded nesting contradicts the kind order, as in continuous
// batching: a request admitted while another runs is recorded inside it,
// and the earlier request may end first; its end does not touch the later
// request's objects. A scope that ends while scopes inside it are open is
// skipped by them from then on.
//
// # Growth
//
// Live bytes per category and per (site, category) are sampled at every
// step end (scope_end of kind step); a trace without steps is sampled at
// request ends, and one without requests at cell ends. A least-squares fit
// over the samples, computed incrementally, gives the slope in bytes per
// step (per sample) and bytes per second. A series is reported as growing
// when it has at least GrowthRule.MinSamples samples, a positive slope with
// R² ≥ GrowthRule.MinR2, and the fitted growth over its samples is at least
// GrowthRule.MinBytes.
//
// # Duplicates
//
// A duplicates finding means what scenario 2 means: copies of the same
// thing alive at the same time, or the same thing built again and again
// where one buffer, or a view of one, would have served.
//
// "The same thing" is what a trace can vouch for: blocks whose content is
// fixed by their shape. That is the attention mask (attn_mask), a
// function of its rows, columns and offset, so the detector considers
// only attn_mask unless Options.DuplicateCategories says otherwise. The
// other categories hold data that differs from block to block even when
// sizes and sites agree, and a fresh block per step is their normal life:
// KV blocks hold other tokens (a paged cache adds one per PageSize
// tokens), activations, logits and batch scratch hold one step's results
// (the caching allocator recycles their memory), the per-call workspace
// holds one call's softmax sums, weights and tokenizer cache entries are
// distinct tensors and keys (a cache that never evicts is growth).
//
// A (site, category) pair of a considered category is a duplicate family
// when it allocated two blocks or more and either allocated in at least
// MinDuplicateSteps distinct periods (the innermost enclosing step scope;
// the request, or the cell, in traces without steps), or had two blocks or
// more alive at once; and one buffer of its largest block, reused for
// every other, would have saved at least MinDuplicateBytes: its bytes
// allocated less that block (Duplicate.SavedBytes). The finding gives the
// family's label (a pattern when labels differ by numbers, "mask[chunk=*]"),
// its sizes, and the most blocks and bytes alive at once
// (Duplicate.MaxLive above 1: copies alive at the same time, as masks kept
// by an autograd graph are).
//
// The engine itself builds no mask unless a caller gives one (its
// attention is causal by position), so a correct run of it, with either
// KV layout, Generate or the scheduler, reports no duplicates.
//
// # Peak
//
// The peak is the first instant allocated bytes reach their maximum. What
// was alive then, by category, site and label, is exact and costs O(1) per
// event: every aggregate keeps its value at the latest peak lazily (saved
// on its first change after a new peak), so a new peak costs nothing but a
// counter increment, even on monotone growth.
//
// # Tracks
//
// Allocated (alloc minus free), reserved (segments of the small and large
// pools), device used (every segment, the outside pool included, or the
// latest "device_used" counter once one appears) and, when present, the
// "go_heap_inuse" counter, as package memstate defines them, are kept as
// a downsampled series of at most Options.MaxPoints points (min and max
// per bucket of events). Their samples at step ends are fitted as for
// growth, and the verdict names which track grows: allocated (live
// objects accumulate: a true leak when they linger), reserved while
// allocated does not (the cache retains freed memory), device used while
// reserved does not (memory taken outside the allocator), or, when all
// three are flat, the Go heap (go_heap_grows: host memory, e.g. a
// substring keeping its whole input buffer alive), whose fitted growth
// must also reach the heap it started from (GoHeapGCShare):
// the heap in use counts garbage until the next collection, which moves
// it that much with nothing kept. Where the Go heap grows, the report
// names the notebook places whose host buffers hold the growth
// (Tracks.HostSites, from a kernel's "go_heap_site N" counters); a cell
// run whose Go heap grows is a phase (go_heap_grows) when those buffers
// hold half its growth or more, a kernel's own bookkeeping not being a
// cell's leak (hostsites.go). The allocated track at
// every sample is kept too, bounded (Tracks.Steps, a StepSeries of at most
// MaxStepPoints points, a point every Stride samples), with its value when
// the first sampled scope began: what traces are compared by step by step.
//
// # Ranks
//
// Several ranks of one distributed job are compared by their reports'
// figures (NewRank, OddRanks): a rank far from the median of the others,
// by more than OddMADs median absolute deviations of theirs and by a
// material difference (OddFraction of that median, OddMinBytes), is odd,
// when fewer than half the ranks are. The figures are the peak, the
// lingering bytes, the bytes allocated at the end, and, step by step, the
// bytes allocated since the first step began, at each step's end (a rank
// departs at the first step from which it is odd to the last); and a rank
// with OOMs where fewer than half had any is odd too.
//
// Memory outside the allocator (segments of event.PoolOutside, memstate's
// Outside) is kept apart too, whatever the device_used counter says:
// Report.Outside is the most held at once and what was still held when
// the session's teardown began (or at the last event, in a trace without
// one), two figures a CI gate can read without the series.
//
// # Services
//
// A trace whose first mark is event.MarkService is a watched service's
// (linger watch; package timeline/goheap writes it): its steps are
// samples, its blocks the heap in use by site, and Report.Service says
// what its counters and marks carry: the heap by site at the first
// sample, the one nearest a third of the way and the last, side by side
// (the sites kept every so many samples, at most 32 samples, so the
// middle one is the nearest kept); the goroutines at the last sample
// against the baseline the trace recorded, within its tolerance (at
// least one goroutine either way); each limit the trace recorded
// (a counter event.CounterThresholdPrefix + NAME) against the samples of
// counter NAME that followed it; the failures and restarts marked; and
// the figures sample by sample, bounded as StepSeries is. Nothing of it
// needs more than the trace: a saved trace's Service is the live one's.
//
// # Concurrency
//
// An Analyzer is not safe for concurrent use: a live stream's owner
// serializes Add and Report. Reports are independent values.
package analyze
