package browser

import (
	"bufio"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"linger/internal/browsertest"
	"linger/internal/testbin"
	"linger/timeline/goheap/goheaptest"
)

// startWatched starts goheaptest's service (this test binary again:
// TestMain), its leak on, and returns its URL. It samples its
// allocations at Go's default rate, as a service in production does: a
// heap profile then costs it a few milliseconds, not the tens that
// recording every allocation costs (the watch's own tests read exact
// bytes).
func startWatched(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), goheaptest.Env+"=leak", goheaptest.RateEnv+"=524288")
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the service did not say its URL: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestWatchView watches a leaky Go service with the linger binary, as a
// user would (linger watch URL), under load, and follows it in the
// browser from the root page's Services list: the live page draws the
// heap by site and the service's lanes, and its findings say the growth
// at the function that leaks, the heap limit crossed, the goroutines
// against their baseline and the heap by site compared over the watch.
func TestWatchView(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end browser test")
	}
	t.Parallel()
	svc := startWatched(t)
	dir := t.TempDir()
	cmd := exec.Command(testbin.Linger(t), "watch", "--every", "400ms", "--timeout", "380ms", "--gc", "--max-heap", "16MiB",
		"--no-browser", "--addr", "127.0.0.1:0", "--dir", dir, "--trace-dir", dir, svc)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("linger watch did not print its URL: %v", err)
	}
	live, err := url.Parse(strings.TrimSpace(line))
	if err != nil || !strings.HasPrefix(live.Path, "/timeline/live/") {
		t.Fatalf("linger watch printed %q, want its live page's URL with the token", line)
	}
	root := "http://" + live.Host + "/?token=" + live.Query().Get("token")

	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if resp, err := http.Get(svc + "/work"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}
	})
	defer func() { close(stop); load.Wait() }()

	p := &page{ctx: browser(t)}
	p.step(t, "open the root page and its Services", 30*time.Second,
		chromedp.Navigate(root),
		chromedp.WaitVisible(css(`[data-testid=source] [data-testid=source-live]`)))
	if name := p.text(t, `[data-testid=source-link]`); name != svc {
		t.Errorf("the Services list names %q, want %s", name, svc)
	}
	p.step(t, "open the service's live timeline", 30*time.Second,
		chromedp.Click(css(`[data-testid=source-link]`)),
		chromedp.WaitVisible(css(`[data-testid=timeline-canvas]`)))
	// The findings, once the watch has had enough samples to judge.
	ready := `(() => {
		const f = document.querySelector("[data-testid=timeline-findings]")?.textContent || "";
		return f.includes("over a limit: heap in use") && f.includes("growth: other at") && f.includes("KeepChunk") &&
			!!document.querySelector("[data-testid=service-comparison] [data-grew]");
	})()`
	if ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(40*time.Second))); err != nil || !ok {
		screenshot(t, p.ctx, "watch-failed.png")
		t.Fatalf("the live page's findings do not judge the leak: %v\n%s", err, p.text(t, `[data-testid=timeline-findings]`))
	}
	findings := eval[string](t, p, "the findings", `document.querySelector("[data-testid=timeline-findings]").textContent`)
	for _, want := range []string{"service " + svc, "/sample", "goroutines: ", "baseline", "Heap in use by site"} {
		if !strings.Contains(findings, want) {
			t.Errorf("the findings do not say %q:\n%s", want, findings)
		}
	}
	// Read at once: the findings are rendered again as reports come.
	if grew := eval[string](t, p, "the site that grew", `document.querySelector("[data-testid=service-comparison] [data-grew] td")?.textContent || ""`); !strings.Contains(grew, "KeepChunk") {
		t.Errorf("the site that grew in the comparison is %q, want KeepChunk's", grew)
	}
	// The chart: the heap by site as objects, the service's lanes drawn.
	drawn := eval[map[string]any](t, p, "the view", `(() => {
		const v = [...window.linger.timeline.views.values()][0];
		return { paint: v.firstPaint > 0, lanes: v.tracks.service !== undefined, objects: v.objects.length,
			site: v.objects.some((o) => (o.label || "").includes("KeepChunk")), breaks: v.axis.breaks.length };
	})()`)
	if drawn["paint"] != true || drawn["lanes"] != true || drawn["site"] != true || drawn["objects"].(float64) < 2 || drawn["breaks"].(float64) != 0 {
		t.Errorf("the live timeline: %v; want painted, the service lanes, the leak's blocks among the objects, no idle breaks", drawn)
	}
	screenshot(t, p.ctx, "watch-live.png")
	checkAxe(t, p, "a watched service's live page", browsertest.AxeSource(t))
}
