package device

// Ptr is a device address: a segment's Addr plus an offset in bytes.
type Ptr = uint64

// Accelerator is a device whose memory the host cannot address (cuda): the
// engine's kernels run on it, on a Stream of its own. Its HasData is true
// (segments hold real data) while Segment.Mem stays nil.
type Accelerator interface {
	Device
	// NewStream makes a stream for one engine. Close it when the engine
	// closes.
	NewStream() (Stream, error)
}

// Stream runs the engine's kernels in order, on memory of its device.
//
// Element types: tensors are bf16 (weights, activations, caches, masks)
// unless a method says f32. Accumulation is always f32 (attention's
// softmax too); the cpu device's float32 kernels are the reference, and a
// Stream agrees with them within bf16 tolerance.
//
// Layouts are row-major and contiguous unless strides are given, and
// match the engine's cpu kernels (engine/kernel.go): a matrix x of m rows
// and k columns is x[i*k+j]; weights are [out, in] as PyTorch's Linear.
//
// Calls are asynchronous, in issue order; the methods that bring data to
// the host (Download, Argmax, TopK) and Sync wait for everything issued
// before them. An error names the kernel or driver call and its cause; a
// stream that returned a launch error may refuse every later call.
//
// A Stream is used by one goroutine at a time.
type Stream interface {
	// Upload copies src to dst; Download copies len(dst) bytes at src to
	// dst. Both are ordered with the stream's kernels.
	Upload(dst Ptr, src []byte) error
	Download(dst []byte, src Ptr) error

	// Fill sets n elements to v. FillUniform sets element j of n to
	// Uniform(seed, stream, j)·scale, rounded to bf16: the engine's
	// random weights, the same values as the cpu device's before rounding.
	Fill(out Ptr, n int, v float32) error
	FillUniform(out Ptr, n int, seed, stream uint64, scale float32) error

	// Embed gathers rows of a [vocab, dim] table: out[r] = table[tokens[r]],
	// out being [len(tokens), dim]. Every token is in [0, vocab).
	Embed(out, table Ptr, tokens []int32, vocab, dim int) error
	// RMSNorm writes x / sqrt(mean(x²) + eps) · w for each of rows rows of
	// dim elements; w is [dim]. out and x may be the same.
	RMSNorm(out, x, w Ptr, rows, dim int, eps float64) error
	// MatMul computes out[m,n] = Σ_k x[m,k]·w[n,k] (w in Linear layout
	// [n, k]) in f32, rounded to bf16 once at the end.
	MatMul(out, x, w Ptr, m, k, n int) error
	// RoPE rotates, in place, each head of each of rows rows of x
	// ([rows, heads, dim]) by the row's position pos0+r with the
	// rotate-half convention of engine/kernel.go's rope, angles
	// (pos0+r)·theta^(-2i/dim) computed in f64.
	RoPE(x Ptr, rows, heads, dim, pos0 int, theta float64) error
	// SwiGLU writes silu(gate)·up into gate, n elements.
	SwiGLU(gate, up Ptr, n int) error
	// Add adds src into dst, n elements.
	Add(dst, src Ptr, n int) error
	// KVWrite copies rows rows of keys and values, k and v [rows, width],
	// into a cache at positions pos, pos+1, ...: position t goes to page
	// t/pageTokens, row t%pageTokens, of K and V (pages as in Attention,
	// each [pageTokens, width]).
	KVWrite(k, v Ptr, rows, width, pos int, K, V []Ptr, pageTokens int) error
	// CausalMask fills a [rows, cols] mask: element (i, j) is 1 where
	// j ≤ i+offset, else 0.
	CausalMask(out Ptr, rows, cols, offset int) error
	// Attention is grouped-query scaled dot-product attention of a chunk
	// of rows over its cache (see Attention).
	Attention(a *Attention) error
	// Argmax returns, for each of rows rows of a [rows, vocab] logits
	// matrix, the index of its largest element (the first on ties).
	Argmax(logits Ptr, rows, vocab int) ([]int32, error)
	// TopK returns the k largest elements of one logits row of vocab
	// elements, largest first (on ties the lower index first), as f32
	// values and their indices.
	TopK(logits Ptr, vocab, k int) ([]float32, []int32, error)

	// Sync waits for everything issued so far and returns the first
	// error the device reported for it.
	Sync() error
	// Elapsed reports the device time, in milliseconds, between the last
	// two Marks (CUDA events on the stream); Mark records one.
	Mark() error
	Elapsed() (float64, error)
	// Close waits for the stream and frees what it holds.
	Close() error
}

// Attention describes one sequence's attention: its rows are consecutive
// positions pos0, pos0+1, ..., and its cache holds keys and values of
// positions [0, Ctx) (the chunk's own included, already written).
type Attention struct {
	// Out and Q are [Rows, Heads, Dim].
	Out, Q Ptr
	Rows   int
	// Heads query heads share KVHeads key/value heads: query head h reads
	// kv head h / (Heads/KVHeads).
	Heads, KVHeads, Dim int
	// Pos0 is the first row's position; Ctx the number of cached tokens
	// visible (Pos0+Rows for a sequence's own chunk).
	Pos0, Ctx int
	// K[i] and V[i] hold tokens [i·PageTokens, (i+1)·PageTokens) ∩ [0, Ctx),
	// each [tokens, KVHeads, Dim]: one page of Ctx tokens for a contiguous
	// cache, 16-token pages for a paged one.
	K, V       []Ptr
	PageTokens int
	// Mask, when not 0, is element (0, 0) of a [Rows, Ctx] mask view with
	// the given strides in elements: 0 masks a key out. When 0, the mask
	// is causal by position (key j is visible to row r when j ≤ Pos0+r).
	// Its elements are bf16, or f32 when MaskF32 (a notebook's mask keeps
	// the dtype it was made with, as on the other devices).
	Mask                         Ptr
	MaskRowStride, MaskColStride int
	MaskF32                      bool
	// LSE receives each row and head's log-sum-exp, f32 [Rows, Heads];
	// -Inf for a row with every key masked (its output is zeros).
	LSE Ptr
	// Workspace is the engine's persistent attention workspace, f32,
	// WorkspaceBytes long, which the kernel may use as scratch (split-K
	// partial results); it holds nothing between calls.
	Workspace      Ptr
	WorkspaceBytes uint64
}

// Uniform is the engine's deterministic random number for element j of
// random stream stream under seed: uniform in [-1, 1), a multiple of
// 2^-23, computed with 64-bit integer arithmetic only, so a GPU kernel
// gives the same bits as the host.
func Uniform(seed, stream, j uint64) float32 {
	h := mix64(mix64(seed^(stream+1)*0x9e3779b97f4a7c15) + j)
	return float32(h>>40)/(1<<23) - 1
}

// mix64 is SplitMix64's finalizer.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}
