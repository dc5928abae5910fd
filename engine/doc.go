// Package engine is Linger's instrumented long-context inference engine: a
// decoder-only transformer (RMSNorm, rotary embeddings, grouped-query
// attention, SwiGLU; DeepSeek's multi-head latent attention and mixture of
// experts) whose every tensor is allocated through the caching
// allocator (package alloc) with a category, a label and the scope it is
// expected to die with, so the timeline can tell a correct run from one
// that leaves memory lingering.
//
// # Model and devices
//
// New loads a model shape (a preset from Presets, or a Config) with weights
// drawn from a seed or read from a safetensors file. On cpu everything is
// float32 and computed in pure Go (kernel.go); on meta the same code runs
// with shapes only: every allocation is made and freed exactly as on a real
// device, but no kernel runs, so a 131072-token prefill of qwen2-1.5b, or
// DeepSeek-V3's 671B parameters, takes well under a second. MLA and MoE run
// on meta and cpu (mla.go, moe.go; the small-moe preset is DeepSeek-V3's
// architecture at a size cpu computes in milliseconds); New refuses them
// on an accelerator with ErrUnsupported. MLA runs weight-absorbed: the
// cache holds each token's compressed latent and rope key
// ("layer.5.kv_latent", KVLoraRank+QKRopeHeadDim values), queries are
// projected into the latent space, and the cache is never expanded per
// head. A MoE layer's router picks each token's top ActiveExperts experts
// (softmax over the chosen logits); its buffers are allocations of their
// own, the same on meta and cpu: "layer.5.moe.router_logits" (R×Experts),
// "layer.5.moe.topk_weights", "layer.5.moe.dispatch" (the tokens permuted
// to their experts, R×ActiveExperts×Hidden), "layer.5.moe.experts.gate"
// and ".up" (R×ActiveExperts×ExpertFFN), "layer.5.moe.combine" (the
// experts' outputs before the weighted sum, R×ActiveExperts×Hidden) and
// the shared experts' "layer.5.moe.shared.gate", ".up", ".down".
// MetaCapacity sizes a meta device for a model (80 GiB, or DeepSeek-V3's
// 1,280 GiB in bf16).
//
// On an accelerator (a device implementing device.Accelerator, such as
// cuda, whose memory the host cannot address) the engine takes one
// device.Stream at New and closes it at Close, its dtype is bf16, and
// every step of the forward pass is a launch on that stream (accel.go):
// the weights' fill (FillUniform, Fill) or their upload from a
// safetensors file (F32 rounded to bf16, or BF16), the embedding,
// RMSNorm, the projections, RoPE, KV writes into contiguous or paged
// caches, attention per sequence, the residual adds, the final norm and
// LM head, the masks a caller makes (CausalMask), and sampling (Argmax, or TopK
// with the temperature draw on the host as on cpu). The tensors, and so
// the trace, are exactly those of meta in bf16: the kernels use no memory
// the allocator does not account for. Each forward pass ends with a Sync;
// a stream's error is the call's error, naming the step ("layer 3: kv
// write: ..."), and everything the call allocated is freed. A tensor's
// data stays on the device: Float32s is nil, ToHost downloads a copy,
// At and Set move one element. Random weights are the same on every
// device (device.Uniform), rounded to bf16 on an accelerator, so cpu is
// the numerical reference; engine/device/devicetest is an accelerator
// over host memory, its kernels in plain Go, against which the tests
// compare the engine and the cuda kernels.
//
// # Scopes
//
// Generate opens a request scope; inside it each prefill chunk ("prefill
// 3/64") and each decode step ("decode 7") is a step scope; inside a step
// each transformer block is a layer scope. A Scheduler opens a request
// scope per admitted request and, per iteration, a batch scope holding the
// batched decode step. Scopes are emitted through the allocator's Emitter;
// with recording off they cost nothing.
//
// # Categories and expectations
//
//	category       expect   what
//	weights        engine   parameters; freed by Engine.Close
//	workspace      engine   the persistent attention workspace (score rows)
//	workspace      step     its per-call part (log-sum-exp), freed by WorkspaceGuard.Release
//	kv_cache       request  keys and values (MLA: latents); freed when the request ends
//	kv_cache       engine   a Scheduler's prefix cache blocks ("prefix.block[HASH]"), freed by eviction or Close
//	attn_mask      (caller) only a caller's masks (CausalMask): the engine builds none
//	activation     layer    a block's temporaries (q, k, v, attention out, gate, up, ...;
//	                        MoE dispatch and combine, which die with their layer too)
//	activation     step     the hidden state of a step and the final norm
//	logits         step     the last token's logits, freed after sampling
//	logits         (caller) router logits a request hands its caller (Request.RouterLogits)
//	batch_scratch  batch    a batch's stacked hidden state and logits (BatchContext)
//
// Attention is causal by position: without Request.Mask (or a mask given to
// Forward) no mask is built, neither per chunk nor per request, as
// FlashAttention's causal flag and vLLM's kernels do it. A mask per chunk
// is scenario 2's leak, one allocation per chunk where none is needed;
// a mask per request costs N² elements (512 MiB at 16K tokens in bf16,
// 32 GiB at 128K) to say what the positions already say. A mask pays
// only when it is not causal, and then a caller's full mask is read
// through views, one per chunk, which allocate nothing.
//
// # Failures and the prefix cache
//
// A forward pass that fails (out of memory in a chunk, a device error)
// frees what it allocated and gives back the KV blocks it reserved for
// its tokens, so a caller's cache (Request.Cache) after a failed prefill
// holds exactly the chunks done: the caller resets it, or keeps it, a
// partial cache lingering. A Scheduler serves on when one request fails:
// the request completes with its error.
//
// With SchedulerOptions.PrefixCache a Scheduler shares prompts' full
// PageSize-token blocks between requests, as vLLM's automatic prefix
// caching does (prefix.go): a block is keyed by its tokens' hash chained
// to its predecessor's, referenced by the running requests that use it,
// and evicted least recently used once free, when a new block needs room
// under PrefixCapacity. Its blocks belong to no request, so they are
// recorded in the engine's scope and expected to die with the engine: a
// correct cache never lingers, and one without a capacity shows as
// kv_cache growth, not as lingering objects.
//
// An object is lingering when the scope it was expected to die with ends
// while it is alive. A correct Generate or Scheduler run leaves none, and
// Engine.Close leaves the allocator at zero allocated bytes. The public
// pieces the scenarios misuse on purpose are KVCache (kept after its
// request: Request.KeepCache), router logits kept for load-balancing
// statistics (Request.RouterLogits), CausalMask and Tensor views (a mask per
// chunk versus views of one full mask: Request.Mask, Engine.Forward),
// BatchContext (not closed) and Workspace guards (not released).
//
// # Concurrency
//
// An Engine runs one call at a time (Generate, Forward, a Scheduler's
// Step): scopes nest on one Emitter. Kernels use goroutines internally.
package engine
