package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"linger/internal/redistest"
	"linger/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// The shapes of the protocol, scaled to a CI minute: 8 long requests at a
// time for 3 seconds (at most 160 of them), each 131,072 tokens of 4
// bytes, every prompt its own; the embedding cache's entries live 1 s in
// windows of 250 ms.
const (
	promptTokens = 131072
	bodyBytes    = 4 * promptTokens
	chunkTokens  = 2048
	embDims      = 1024
	entryBytes   = 4 * embDims
	concurrency  = 8
	loadFor      = "3s"
	maxRequests  = 160
	ttl          = time.Second
	window       = 250 * time.Millisecond
	lingerToken  = "gateway-test-token-0123456789"
	startTimeout = 30 * time.Second
)

// proc is a process a test started: its stdout's first URL, and the last
// lines of its stderr.
type proc struct {
	name string
	cmd  *exec.Cmd
	url  string // http://HOST:PORT, no trailing slash
	done chan struct{}

	mu   sync.Mutex
	tail []string
}

var urlLine = regexp.MustCompile(`http://[^\s/?]+`)

// start starts bin with args, waits for the URL it prints on stdout and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func start(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin") // no linger-cuda: the server starts at once
	p.cmd.Stderr = p
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := urlLine.FindString(sc.Text()); u != "" {
				select {
				case urls <- u:
				default:
				}
			}
		}
	}()
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s's last lines:\n%s", name, p.lines())
		}
	})
	select {
	case p.url = <-urls:
	case <-p.done:
		t.Fatalf("%s exited before printing its URL:\n%s", name, p.lines())
	case <-time.After(startTimeout):
		t.Fatalf("%s printed no URL within %v:\n%s", name, startTimeout, p.lines())
	}
	return p
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, strings.Split(strings.TrimRight(string(b), "\n"), "\n")...)
	if len(p.tail) > 300 {
		p.tail = p.tail[len(p.tail)-300:]
	}
	return len(b), nil
}

func (p *proc) lines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop ends the process with SIGTERM, as a deployment does, and waits.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// get returns the body of a GET, failing t on anything but 200.
func get(t *testing.T, url string, header ...string) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v %.300s", url, resp.StatusCode, err, b)
	}
	return b
}

// goroutines reads the service's goroutine count from its pprof endpoint.
func goroutines(t *testing.T, base string) int {
	t.Helper()
	line, _, _ := strings.Cut(string(get(t, base+"/debug/pprof/goroutine?debug=1")), "\n")
	n, err := strconv.Atoi(strings.TrimPrefix(line, "goroutine profile: total "))
	if err != nil {
		t.Fatalf("goroutine profile starts %q", line)
	}
	return n
}

// metric returns the value of the series name (with its labels, as
// exposed) on the service's /metrics; -1 when it has none.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(string(get(t, base+"/metrics")), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

// heapAfterGC is the service's Go heap in use after a forced GC.
func heapAfterGC(t *testing.T, base string) float64 {
	t.Helper()
	get(t, base+"/debug/pprof/heap?gc=1")
	return metric(t, base, "go_memstats_heap_inuse_bytes")
}

// loadSummary is what linger load --json prints (the fields the tests
// read).
type loadSummary struct {
	Requests, OK, Failed uint64
	Errors               map[string]uint64
	DistinctOK           uint64                     `json:"distinct_ok"`
	PromptTokens         int                        `json:"prompt_tokens"`
	PromptBytes          int                        `json:"prompt_bytes"`
	Cache                map[string]uint64          `json:"cache"`
	Latency              struct{ P50, P99 float64 } `json:"latency_ms"`
}

// runLoad runs linger load (the binary, bin) against the gateway and
// returns its summary, or why it printed none. It may run on any
// goroutine.
func runLoad(bin, base string, args ...string) (loadSummary, error) {
	args = append([]string{"load", base + "/v1/generate", "--json", "--progress", "0", "--prompt-tokens", strconv.Itoa(promptTokens)}, args...)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var s loadSummary
	if jerr := json.Unmarshal(stdout.Bytes(), &s); jerr != nil {
		return s, fmt.Errorf("linger load: %v, %v\n%s%s", err, jerr, stdout.String(), stderr.String())
	}
	return s, nil // a failed request is in the summary, and exits 1
}

// load is runLoad on the test's goroutine, logging the summary.
func load(t *testing.T, base string, args ...string) loadSummary {
	t.Helper()
	s, err := runLoad(testbin.Linger(t), base, args...)
	if err != nil {
		t.Fatal(err)
	}
	logLoad(t, s)
	return s
}

func logLoad(t *testing.T, s loadSummary) {
	t.Logf("linger load: %d requests, %d ok, %d failed, p50 %.0f ms, p99 %.0f ms, cache %v", s.Requests, s.OK, s.Failed, s.Latency.P50, s.Latency.P99, s.Cache)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// baseline returns the gateway's goroutines before the load, once its
// probe has posted (its connection to the server is part of the
// baseline): an empty prompt, refused, records a request scope and
// nothing else.
func baseline(t *testing.T, gw string) int {
	t.Helper()
	resp, err := http.Post(gw+"/v1/generate", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an empty prompt: %s; want 400", resp.Status)
	}
	waitFor(t, 5*time.Second, "the probe's first post", func() bool { return metric(t, gw, "linger_probe_events_sent_total") > 0 })
	http.DefaultClient.CloseIdleConnections()
	// The fewest of a few looks: a look may count a goroutine of the
	// moment (the probe's post under way), which is no baseline.
	base := goroutines(t, gw)
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		base = min(base, goroutines(t, gw))
	}
	return base
}

// backToBaseline waits (at most 10 s, forcing GCs) for the service's
// goroutines to be back to base, at most 5 % over it: the field report's
// check, which looks for goroutines the load left behind (fewer than the
// baseline is none left behind).
func backToBaseline(t *testing.T, gw string, base int) {
	t.Helper()
	var n int
	deadline := time.Now().Add(10 * time.Second)
	for {
		get(t, gw+"/debug/pprof/heap?gc=1")
		n = goroutines(t, gw)
		if n*100 <= 105*base {
			t.Logf("goroutines: %d before the load, %d after", base, n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d after the load, baseline %d: more than 5 %% over it\n%s", n, base, get(t, gw+"/debug/pprof/goroutine?debug=1"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lingerServer is a Linger server (linger serve) with its traces in a
// temporary directory.
func lingerServer(t *testing.T) *proc {
	dir := t.TempDir()
	return start(t, "linger serve", testbin.Linger(t), "serve", "--dir", dir, "--trace-dir", dir, "--addr", "127.0.0.1:0", "--token", lingerToken)
}

// report is the analyzer's report of a trace, as the server answers it.
type report struct {
	Lingering struct {
		Count, Bytes, Leaked uint64
		LateFrees            uint64 `json:"late_frees"`
		BySite               []struct {
			Category, Site string
			Count, Bytes   uint64
		} `json:"by_site"`
	}
}

// bySite sums the lingering objects whose site's innermost frame is fn.
func (r *report) bySite(fn string) (count, bytes uint64) {
	for _, s := range r.Lingering.BySite {
		if strings.HasPrefix(s.Site, fn+" ") {
			count += s.Count
			bytes += s.Bytes
		}
	}
	return count, bytes
}

func lingerReport(t *testing.T, ls *proc, path string) *report {
	t.Helper()
	var r report
	if err := json.Unmarshal(get(t, ls.url+path, "Authorization", "token "+lingerToken), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// The sites the gateway's objects are recorded at: the request body's
// and the embedding cache entry's.
const (
	siteBody  = "linger/examples/gateway.(*Gateway).generate"
	siteEntry = "linger/examples/gateway.(*embCache).record"
)

// TestGatewayLeaks runs the field report's protocol, scaled to a CI
// minute, on the real gateway over HTTP with a real Redis beside it and
// its probe posting to a real Linger server: linger load sends 8
// concurrent requests of 131,072 tokens for 3 seconds, every prompt its
// own. Leaky (--leaky): every embedding cache entry is still in Redis
// after its TTL window ended and lingers (one per prompt, 4 KiB each),
// every request body is held whole by the 100 bytes the document index
// kept of it and lingers (512 KiB each), the tokenizer's cache holds
// every chunk's ids (8 bytes a token), and the Go heap after a GC holds
// at least all of it. Fixed: nothing lingers, Redis is empty once the
// TTL passed, the tokenizer's cache stays at its bound, the heap small.
// Both: no request fails, and the gateway's goroutines are back within
// 5 % of their baseline after the load.
func TestGatewayLeaks(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds linger and the gateway, runs Redis and a load")
	}
	ls := lingerServer(t)
	for _, leaky := range []bool{true, false} {
		name := map[bool]string{true: "leaky", false: "fixed"}[leaky]
		t.Run(name, func(t *testing.T) {
			rd := redistest.Start(t)
			source := "gateway-" + name
			args := []string{"--addr", "127.0.0.1:0", "--redis", rd.Addr(), "--engines", "2",
				"--chunk-tokens", strconv.Itoa(chunkTokens), "--embedding-dims", strconv.Itoa(embDims),
				"--cache-ttl", ttl.String(), "--cache-window", window.String(),
				"--linger", ls.url + "/", "--linger-token", lingerToken, "--probe-name", source}
			if leaky {
				args = append(args, "--leaky")
			}
			gw := start(t, "gateway", testbin.Gateway(t), args...)
			base := baseline(t, gw.url)

			s := load(t, gw.url, "--concurrency", strconv.Itoa(concurrency), "--duration", loadFor, "--requests", strconv.Itoa(maxRequests))
			if s.OK == 0 || s.Failed != 0 || s.DistinctOK != s.OK || s.PromptBytes != bodyBytes {
				t.Fatalf("load: %d ok, %d failed %v, %d distinct prompts answered, prompts of %d B; want every request answered, each its own prompt of %d B", s.OK, s.Failed, s.Errors, s.DistinctOK, s.PromptBytes, bodyBytes)
			}
			if s.Cache["miss"] != s.OK {
				t.Errorf("cache %v: want %d misses, every prompt new", s.Cache, s.OK)
			}
			backToBaseline(t, gw.url, base)

			n := s.DistinctOK
			chunks := uint64(promptTokens / chunkTokens)
			wantLinger := uint64(0)
			if leaky {
				wantLinger = n * (bodyBytes + entryBytes)
			}
			// Every TTL window ends within TTL + 2 windows of the last
			// write (the sweep runs every window).
			time.Sleep(ttl + 2*window)
			waitFor(t, 5*time.Second, "the TTL windows to end and the probe's events to reach the server", func() bool {
				return metric(t, gw.url, "linger_probe_lingering_bytes") == float64(wantLinger) &&
					metric(t, gw.url, "linger_probe_events_sent_total") > 0 &&
					lingerReport(t, ls, "/api/timeline/sources/"+source+"/report").Lingering.Bytes == wantLinger
			})
			// Leaky, each chunk is a buffer (batch_scratch); fixed, each
			// request's text is one.
			wantScratch := n
			if leaky {
				wantScratch = n * chunks
			}
			if got := metric(t, gw.url, `linger_probe_allocations_total{category="batch_scratch"}`); got != float64(wantScratch) {
				t.Errorf("batch_scratch buffers recorded: %v, want %d (%d requests of %d chunks)", got, wantScratch, n, chunks)
			}
			dbsize, err := rd.Do("DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			heap := heapAfterGC(t, gw.url)
			tok := metric(t, gw.url, `linger_probe_live_bytes{category="tokenizer_cache"}`)
			t.Logf("after the TTL: Redis holds %s keys, the tokenizer's cache %.1f MiB, the Go heap %.1f MiB in use", dbsize, tok/(1<<20), heap/(1<<20))

			r := lingerReport(t, ls, "/api/timeline/sources/"+source+"/report")
			bodies, bodyB := r.bySite(siteBody)
			entries, entryB := r.bySite(siteEntry)
			if !leaky {
				if r.Lingering.Count != 0 || dbsize != "0" {
					t.Errorf("fixed: %d objects lingering (%d B), Redis holds %s keys; want none", r.Lingering.Count, r.Lingering.Bytes, dbsize)
				}
				if max := float64(gatewayDefaultTokenizerCache * chunkTokens * 8); tok > max {
					t.Errorf("fixed: the tokenizer's cache holds %.0f B, over its bound of %.0f", tok, max)
				}
				if heap > 64<<20 {
					t.Errorf("fixed: the Go heap holds %.1f MiB in use after a GC; want under 64 MiB", heap/(1<<20))
				}
				return
			}
			if bodies != n || bodyB != n*bodyBytes {
				t.Errorf("leaky: %d request bodies lingering, %d B; want %d of %d B", bodies, bodyB, n, bodyBytes)
			}
			if entries != n || entryB != n*entryBytes || dbsize != strconv.FormatUint(n, 10) {
				t.Errorf("leaky: %d cache entries lingering, %d B, Redis holds %s keys; want %d entries of %d B", entries, entryB, dbsize, n, entryBytes)
			}
			if r.Lingering.Count != 2*n || r.Lingering.Leaked != 2*n || r.Lingering.LateFrees != 0 {
				t.Errorf("leaky: %d lingering, %d leaked, %d late frees; want the %d bodies and %d entries, leaked", r.Lingering.Count, r.Lingering.Leaked, r.Lingering.LateFrees, n, n)
			}
			if want := float64(n * promptTokens * 8); tok != want {
				t.Errorf("leaky: the tokenizer's cache holds %.0f B; want %.0f, every chunk's ids", tok, want)
			}
			if held := float64(n * (bodyBytes + promptTokens*8)); heap < held {
				t.Errorf("leaky: the Go heap holds %.1f MiB in use after a GC, under the %.1f MiB the bodies and the tokenizer's cache hold", heap/(1<<20), held/(1<<20))
			}
			key, err := rd.Do("RANDOMKEY")
			if !regexp.MustCompile(`^linger:gw:\{tenant-0\}:emb:[0-9a-f]{32}$`).MatchString(key) {
				t.Errorf("leaky: a key %q (%v); want linger:gw:{tenant-0}:emb:HASH", key, err)
			}
			if ttl, err := rd.Do("TTL", key); err != nil || ttl != "-1" {
				t.Errorf("leaky: the TTL of %s is %s (%v); want -1, none", key, ttl, err)
			}

			// Stopped, the gateway's probe ends its trace, and the saved
			// trace says what the live one did.
			gw.stop()
			var list []struct {
				ID, Trace string
				Live      bool
			}
			json.Unmarshal(get(t, ls.url+"/api/timeline/sources", "Authorization", "token "+lingerToken), &list)
			for _, e := range list {
				if e.ID == source {
					if e.Live {
						t.Errorf("source %s still live after the gateway stopped", source)
					}
					saved := lingerReport(t, ls, "/api/timeline/traces/"+e.Trace+"/report")
					if saved.Lingering.Count != r.Lingering.Count || saved.Lingering.Bytes != r.Lingering.Bytes {
						t.Errorf("saved trace %s: %d lingering, %d B; live: %d, %d B", e.Trace, saved.Lingering.Count, saved.Lingering.Bytes, r.Lingering.Count, r.Lingering.Bytes)
					}
				}
			}
		})
	}
}

// gatewayDefaultTokenizerCache is gateway.DefaultTokenizerCache.
const gatewayDefaultTokenizerCache = 256

// TestGatewayRedisAway: the embedding cache's Redis is killed in the
// middle of a load and comes back empty. The gateway says so once each
// way, in its log and on /metrics, serves every request meanwhile (as
// cache misses), and uses the new Redis once it answers; the entries the
// old one took with it are freed by the sweep, none lingering.
func TestGatewayRedisAway(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds linger and the gateway, runs Redis and a load")
	}
	rd := redistest.Start(t)
	gw := start(t, "gateway", testbin.Gateway(t), "--addr", "127.0.0.1:0", "--redis", rd.Addr(),
		"--cache-ttl", ttl.String(), "--cache-window", window.String())
	bin := testbin.Linger(t)
	type result struct {
		s   loadSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := runLoad(bin, gw.url, "--concurrency", "4", "--duration", "4s", "--distinct", "16")
		done <- result{s, err}
	}()
	time.Sleep(time.Second)
	rd.Kill()
	waitFor(t, 5*time.Second, "the gateway to say Redis is gone", func() bool { return metric(t, gw.url, "gateway_redis_up") == 0 })
	time.Sleep(time.Second)
	rd.Restart()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	s := res.s
	logLoad(t, s)
	waitFor(t, 5*time.Second, "the gateway to say Redis is back", func() bool { return metric(t, gw.url, "gateway_redis_up") == 1 })
	if s.Failed != 0 || s.OK == 0 {
		t.Errorf("load: %d ok, %d failed %v; want every request served while Redis was away", s.OK, s.Failed, s.Errors)
	}
	if s.Cache["error"] == 0 || s.Cache["hit"] == 0 || s.Cache["miss"] == 0 {
		t.Errorf("cache %v: want hits, misses, and errors (served as misses) while Redis was away", s.Cache)
	}
	log := gw.lines()
	for _, want := range []string{"redis unreachable: embedding cache off, requests served as cache misses until it answers", "redis answers again: embedding cache on"} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("the gateway's log says %q %d times; want once", want, n)
		}
	}
	// What the old Redis held is gone: the sweep frees each entry once
	// its TTL passed, and none lingers.
	waitFor(t, 5*time.Second, "the cache's entries to be freed", func() bool {
		return metric(t, gw.url, "gateway_embedding_cache_entries") == 0
	})
	if v := metric(t, gw.url, "linger_probe_lingering_bytes"); v != 0 {
		t.Errorf("%v bytes lingering; want none", v)
	}
}
