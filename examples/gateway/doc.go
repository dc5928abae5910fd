// Package gateway is a small HTTP inference gateway on Linger's engine,
// for Linger to watch: it takes long prompts (131,072 tokens and more on
// the meta device, where they cost only accounting), chunks them,
// caches each prompt's embedding in Redis, runs the prompt through a
// pool of engines and answers with what was generated. It serves
// net/http/pprof and Prometheus metrics (client_golang's Go collector
// and the probe's) on its own mux, and records its buffers with Linger's
// probe: the request body and its chunk buffers (batch_scratch) as
// objects expected to die with their request, each request a scope, and
// each embedding cache entry as an object expected to die with the TTL
// window it was written in.
//
// The field report's service leaks can each be switched on (Leaks):
//
//   - Substring (§5): the chunker keeps bytes 100 to 200 of each body in
//     a document index as a slice of the body, which keeps the whole
//     body alive; the fixed chunker copies them.
//   - Cache (§4.1): embedding cache entries written without a TTL and
//     never evicted; the fixed cache writes each with its TTL and sweeps
//     its namespace, unlinking what has none.
//   - Tokenizer: the tokenizer's encode cache unbounded and keyed by a
//     fresh key per call; the fixed one is a bounded LRU keyed by the
//     chunk's content.
//   - Chunks: each prompt chunk copied into a buffer of its own, the
//     chunk allocation rate the report alerts on; the fixed chunker takes
//     each chunk as a substring of the prompt's text.
//
// docs/gateway.md says how each is recorded and what Linger shows of it;
// the main package is examples/gateway/cmd/gateway.
package gateway
