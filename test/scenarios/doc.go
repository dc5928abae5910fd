// Package scenarios runs the notebooks in examples/ headless, as a user's
// CI would (`linger run NOTEBOOK --out --trace --report`), and checks what
// each one claims against the analyzer's verdict over the kernel's trace,
// never against values the notebook prints about itself.
//
// Every scenario notebook has a leaky part (code cells whose ids start
// with "leaky-") and a fixed part ("fixed-"). Every allocation's site names
// the cell and the Starlark line that caused it, so the tests attribute
// lingering objects, duplicate families and peaks to one part or the
// other, and assert, per notebook:
//
//   - the notebook is valid nbformat 4.5, committed without outputs, with
//     the cell id conventions above and an "intro" markdown cell first;
//   - every cell runs without error (the run time is logged, not asserted);
//   - the leaky part leaves lingering bytes of the scenario's category,
//     equal to the figure computed in Go from the engine's model shapes and
//     the notebook's loop, at the expected cell and line, held by the
//     expected reference (the kernel's end-of-run retention walk);
//   - the fixed part leaves no lingering object of that category;
//   - the scenario's figures (allocation counts, peaks, residue) as the
//     analyzer reports them.
//
// Each notebook runs twice, as the subtests meta and cuda of its test
// (targets_test.go): as committed, on device "meta" in the linger kernel;
// and with `--kernel linger-cuda --param DEVICE=cuda`, on device "cuda" in
// the CUDA kernel on the fake driver (engine/device/cuda/fakecuda), with
// the same assertions. The figures are computed from shapes, and the cuda
// device runs in accounting mode with meta's allocator, so they hold
// unchanged, but for what the fake's card adds, computed from its
// configured size: the CUDA context (64 MiB) is device memory outside the
// allocator, so device used − reserved ends at the context (checked for
// every notebook: it proves the run was on cuda), 08's released outside
// memory leaves the context, and 07's 16 GiB memory_limit, counted against
// the device's used memory, refuses a context's bytes sooner. The fake's
// card is the meta device's 80 GiB, which the notebooks are sized for.
//
// The cuda subtests need linger-cuda and the fake driver: make cuda-check
// (part of make test) builds both and runs them with LINGER_CUDA_BIN and
// LINGER_FAKECUDA_DIR set, and LINGER_REQUIRE_CUDA=1, which fails a cuda
// subtest that would skip; without them (go test ./test/scenarios) the
// cuda subtests skip, naming make cuda-check.
//
// The package has only tests; TestMain builds the linger binary once.
package scenarios
