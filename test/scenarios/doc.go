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
// The package has only tests; TestMain builds the linger binary once.
package scenarios
