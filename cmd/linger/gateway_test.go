package main

import (
	"bufio"
	"context"
	"io"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"linger/internal/redistest"
	"linger/internal/testbin"
	"linger/timeline/analyze"
	"linger/timeline/goheap"
)

// startGateway starts the example gateway (examples/gateway, built by
// testbin) with args and returns its URL; it stops with the test.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(testbin.Gateway(t), append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncLog
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the gateway's log:\n%s", stderr.String())
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u := regexp.MustCompile(`http://[^\s/]+`).FindString(sc.Text()); u != "" {
				urls <- u
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-urls:
		return u
	case <-done:
		t.Fatalf("the gateway exited: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the gateway said no URL in 30 s: %s", stderr.String())
	}
	return ""
}

// TestGatewayWatch: linger watch on the example gateway (a real process,
// its embedding cache in a real Redis) under the field report's load,
// scaled down: 16 requests of 131,072 tokens, 8 at a time, between
// samples (each after a forced GC; the gateway samples an allocation
// every 4 KiB, so that a body of 512 KiB is always in its heap profile).
// Leaky (--leaky): the heap grows on the timeline at readBody, where the
// bodies the document index holds were read, by 16 × 512 KiB a sample,
// and at the tokenizer's cache; the heap threshold (64 MiB above the
// start) and the chunk allocation rate (copyChunk, 200 a second) trip.
// Fixed: nothing grows, no threshold trips. Both: the goroutines end back
// within 5 % of their baseline.
func TestGatewayWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds the gateway, runs Redis and a load")
	}
	const (
		samples  = 10
		perLoad  = 16
		bodySize = 4 * 131072
	)
	for _, leaky := range []bool{true, false} {
		name := map[bool]string{true: "leaky", false: "fixed"}[leaky]
		t.Run(name, func(t *testing.T) {
			rd := redistest.Start(t)
			args := []string{"--redis", rd.Addr(), "--cache-ttl", "2s", "--mem-profile-rate", "4096"}
			if leaky {
				args = append(args, "--leaky")
			}
			gw := startGateway(t, args...)
			set := testSettings()
			tg, _ := newTestTarget(t, gw, set)
			set.limits.MaxHeap = heapInuse(t, tg) + 64*mib
			set.limits.MaxGCPause = time.Second // a loaded CI machine's pauses are not the point here
			set.limits.AllocRates = []goheap.AllocRate{{Pattern: "copyChunk", Limit: 200, Objects: true}}
			tg, log := newTestTarget(t, gw, set)

			lc := loadConfig{concurrency: 8, duration: time.Minute, requests: perLoad, promptTokens: 131072, tenants: 1, maxNew: 1, timeout: time.Minute, seed: 1}
			if err := lc.check(context.Background(), gw+"/v1/generate"); err != nil {
				t.Fatal(err)
			}
			for k := 1; k <= samples; k++ {
				if k > 1 {
					lc.seed = uint64(k) // new prompts every time
					s, err := load(context.Background(), lc, io.Discard)
					if err != nil || s.OK != perLoad {
						t.Fatalf("load before sample %d: %+v %v", k, s, err)
					}
				}
				if r := tg.sample(context.Background()); !r.Stepped {
					t.Fatalf("sample %d recorded no step:\n%s", k, log)
				}
			}
			tg.stop(10 * time.Second)
			rep := traceReport(t, tg)
			names := rep.CellNames()
			var body *analyze.Growth
			var grew []string
			for i, g := range rep.Growth {
				site := names.Short(rep.Site(g.SiteID))
				grew = append(grew, site)
				t.Logf("growth at %s: %+.1f MiB a sample, R² %.3f", site, g.BytesPerStep/mib, g.R2)
				if strings.Contains(site, "readBody") {
					body = &rep.Growth[i]
				}
			}
			s := rep.Service
			if s == nil {
				t.Fatal("no service section in the report")
			}
			breached := map[string]bool{}
			for _, th := range s.Thresholds {
				breached[th.Counter] = th.Breached
				t.Logf("threshold %s: breached %v, largest %v", th.Counter, th.Breached, th.Max)
			}
			if g := s.Goroutines; g == nil || !g.Within {
				t.Errorf("goroutines %+v: want back within 5 %% of the baseline after the load", g)
			}
			if !leaky {
				if len(rep.Growth) != 0 || strings.Contains(log.String(), "OVER") {
					t.Errorf("fixed: growth at %q; terminal:\n%s\nwant nothing growing, no limit crossed", grew, log)
				}
				return
			}
			// The bodies kept at each step's end: perLoad more at each
			// sample after the first, none more at the final one.
			var ideal []float64
			for k := range samples {
				ideal = append(ideal, float64(k*perLoad*bodySize))
			}
			want := slope(append(ideal, ideal[samples-1]))
			if body == nil || math.Abs(body.BytesPerStep-want) > 0.05*want || body.R2 < 0.95 {
				t.Errorf("leaky: growth at readBody %+v (all: %q); want %+.2f MiB a sample (%d bodies of %d KiB a sample, none at the final), within 5 %%", body, grew, want/mib, perLoad, bodySize>>10)
			}
			if !slices.ContainsFunc(grew, func(s string) bool { return strings.Contains(s, "tokenizer") }) {
				t.Errorf("leaky: growth at %q; want the tokenizer's cache among them", grew)
			}
			if !breached["go_heap_inuse"] || !breached["alloc_objects_per_second copyChunk"] {
				t.Errorf("leaky: breached %v; want the heap in use and copyChunk's allocation rate", breached)
			}
			if c := s.Comparison; len(c.Points) != 3 || !slices.ContainsFunc(c.Rows, func(r analyze.ComparisonRow) bool { return strings.Contains(r.Site, "readBody") && r.Grew }) {
				t.Errorf("leaky: comparison %+v; want readBody among the sites that grew", c)
			}
		})
	}
}

// slope is the least-squares slope of y over 0, 1, 2, ….
func slope(y []float64) float64 {
	n := float64(len(y))
	var sx, sy, sxx, sxy float64
	for i, v := range y {
		x := float64(i)
		sx, sy, sxx, sxy = sx+x, sy+v, sxx+x*x, sxy+x*v
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
