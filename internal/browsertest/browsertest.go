// Package browsertest is the harness of Linger's browser tests: it finds
// Chromium, starts it headless with one set of flags, injects axe-core and
// bundles the web UI's scripts.
//
// The rule for what is missing is the same everywhere: a test that runs
// in `make test` fails, never skips, when Chromium, axe-core or esbuild is
// not installed, saying how to install it (`make browser`, which `make
// test` runs, installs Chromium and axe-core; `make ui` installs esbuild).
// A test that passes because it tested nothing is worse than a red one.
// The opt-in measurements (Measure) skip when LINGER_BROWSER=1 is unset,
// and from there follow the same rule.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Window is the browser window's size, in CSS pixels, unless a test sets
// its own.
const Window = "1400,900"

// Chromium returns the Chromium to run: $CHROMIUM when set, else the first
// of chromium, chromium-browser and google-chrome found on $PATH. It fails
// t when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	exe, err := chromium()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func chromium() (string, error) {
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if c := os.Getenv("CHROMIUM"); c != "" {
		names = []string{c}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found (looked for %v on $PATH; $CHROMIUM names another): "+
		"run `make browser` (or, as root, apt-get install chromium)", names)
}

// Flags returns the command-line flags of a headless Chromium for tests,
// with a fresh profile in userDataDir (an empty directory the test owns):
// no sandbox (tests run as root in containers), no GPU, and none of the
// browser's own network traffic (updates, sync, first-run pages) that
// would add noise to measurements. The window size is Window; a later
// --window-size flag overrides it.
func Flags(userDataDir string) []string {
	return []string{"--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--no-first-run", "--window-size=" + Window, "--user-data-dir=" + userDataDir}
}

// AllocatorOptions returns chromedp's options to run exe as Flags does,
// on top of chromedp's defaults; the fresh profile is one chromedp
// creates, and removes when the allocator's context is cancelled.
func AllocatorOptions(exe string) []chromedp.ExecAllocatorOption {
	return append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.Flag("window-size", Window))
}

// Browser is one headless Chromium driven by chromedp, started by the
// first test that needs it and shared by the tests after it; each Tab is
// in its own browser context (cookies and cache apart). The zero value is
// ready to use; Close it from TestMain after m.Run.
type Browser struct {
	once   sync.Once
	ctx    context.Context
	err    error
	cancel context.CancelFunc
}

// Context returns the browser's context, starting Chromium on the first
// call. It fails t when Chromium is missing or does not start.
func (b *Browser) Context(t testing.TB) context.Context {
	t.Helper()
	b.once.Do(func() {
		exe, err := chromium()
		if err != nil {
			b.err = err
			return
		}
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), AllocatorOptions(exe)...)
		ctx, cancelBrowser := chromedp.NewContext(actx)
		b.cancel = func() { cancelBrowser(); cancelAlloc() }
		// The browser lives as long as the context of its first run.
		if err := chromedp.Do(ctx); err != nil {
			b.err = fmt.Errorf("start %s: %w", exe, err)
			return
		}
		b.ctx = ctx
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.ctx
}

// Tab opens a new tab in a new browser context of b, closed when t ends,
// whose steps must all be done within timeout. It fails t when the
// browser does not start or the tab does not open.
func (b *Browser) Tab(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.Context(t), chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelT)
	// Opens the tab on ctx, which the steps' shorter contexts derive from.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// Close stops the browser, if it was started, and removes its profile.
func (b *Browser) Close() {
	if b.cancel != nil {
		b.cancel()
	}
}

// Measure gates an opt-in browser measurement, reported rather than
// asserted: it skips t unless LINGER_BROWSER=1. It returns the trace size
// to measure with (LINGER_BROWSER_EVENTS, default a million events) and
// the Chromium to run (see Chromium; it fails t when there is none).
func Measure(t testing.TB) (events uint64, chromium string) {
	t.Helper()
	if os.Getenv("LINGER_BROWSER") != "1" {
		t.Skip("a browser measurement: set LINGER_BROWSER=1 to run it")
	}
	events = 1_000_000
	if s := os.Getenv("LINGER_BROWSER_EVENTS"); s != "" {
		if _, err := fmt.Sscan(s, &events); err != nil {
			t.Fatalf("LINGER_BROWSER_EVENTS=%q: %v", s, err)
		}
	}
	return events, Chromium(t)
}

// BundleUI bundles the given entries of web/ui/src (e.g. "timeline.js")
// into dir with the esbuild of web/ui/node_modules, as `make ui` does,
// minified or not. It fails t when esbuild is not installed.
func BundleUI(t testing.TB, dir string, minify bool, entries ...string) {
	t.Helper()
	ui := filepath.Join(Root(t), "web", "ui")
	esbuild := filepath.Join(ui, "node_modules", ".bin", "esbuild")
	if _, err := os.Stat(esbuild); err != nil {
		t.Fatalf("esbuild is not installed (%v): run `make ui`, or npm ci --prefix web/ui", err)
	}
	args := []string{"--bundle", "--format=esm", "--outdir=" + dir, "--log-level=warning"}
	if minify {
		args = append(args, "--minify")
	}
	for _, e := range entries {
		args = append(args, filepath.Join(ui, "src", e))
	}
	if out, err := exec.Command(esbuild, args...).CombinedOutput(); err != nil {
		t.Fatalf("esbuild: %v\n%s", err, out)
	}
}

// AxeSource returns axe-core's browser build, which `npm ci --prefix
// test/browser` installs (`make browser` runs it). It fails t when
// axe-core is not installed.
func AxeSource(t testing.TB) string {
	t.Helper()
	path := filepath.Join(Root(t), "test", "browser", "node_modules", "axe-core", "axe.min.js")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("axe-core is not installed (%v): run `make browser`, or npm ci --prefix test/browser", err)
	}
	return string(b)
}

// AxeViolation is one rule axe-core found broken, with where: the
// selectors of at most five of the nodes that break it.
type AxeViolation struct {
	ID, Impact, Help string
	Targets          []string
}

// Serious reports whether v is a serious or critical violation.
func (v AxeViolation) Serious() bool { return v.Impact == "serious" || v.Impact == "critical" }

// Axe injects axe-core (source, from AxeSource) into the page of ctx and
// runs it on the document as it is.
func Axe(ctx context.Context, source string) ([]AxeViolation, error) {
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](source+";\ntrue", chromedp.EvalAsValue, chromedp.EvalAwaitPromise)); err != nil {
		return nil, fmt.Errorf("inject axe-core: %w", err)
	}
	vs, err := chromedp.Run(ctx, chromedp.Evaluate[[]AxeViolation](`axe.run(document, { resultTypes: ["violations"] }).then((r) =>
		r.violations.map((v) => ({ id: v.id, impact: v.impact || "", help: v.help, targets: v.nodes.slice(0, 5).map((n) => n.target.join(" ")) })))`,
		chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("axe.run: %w", err)
	}
	return vs, nil
}

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// Root returns the module's root directory: the nearest directory above
// the test's working directory (its package's) that holds go.mod.
func Root(t testing.TB) string {
	t.Helper()
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				root = dir
				return
			}
			up := filepath.Dir(dir)
			if up == dir {
				rootErr = errors.New("no go.mod above the test's directory")
				return
			}
			dir = up
		}
	})
	if rootErr != nil {
		t.Fatal(rootErr)
	}
	return root
}
