// Command gateway is a small HTTP inference gateway on Linger's engine,
// for Linger to watch (package linger/examples/gateway, docs/gateway.md):
//
//	gateway [--addr 127.0.0.1:8080] [--model qwen2-1.5b] [--device meta|cpu] [--redis 127.0.0.1:6379]
//	        [--linger URL --linger-token T | --trace FILE] [--leak-substring] [--leak-cache] [--leak-tokenizer] [--leak-chunks] [flags]
//
// It prints the URL it serves at, and serves until SIGINT or SIGTERM:
// POST /v1/generate?tenant=T&max_new_tokens=M with the prompt's text as
// the body, GET /healthz, GET /metrics and /debug/pprof/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"linger/examples/gateway"
	"linger/internal/units"
	"linger/probe"
	"linger/timeline"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		o                               gateway.Options
		addr, maxBody, lingerURL, token string
		probeName, trace                string
		leaky, allowRemote              bool
		memProfileRate                  int
		ttl, window, sweep              time.Duration
	)
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "listen on `HOST:PORT` (127.0.0.1:0 picks a free port)")
	fs.BoolVar(&allowRemote, "allow-remote", false, "listen beyond loopback (pprof and metrics are served unauthenticated)")
	fs.StringVar(&o.Model, "model", gateway.DefaultModel, "model preset (cpu: small or tiny)")
	fs.StringVar(&o.Device, "device", "meta", "device: meta (accounting only) or cpu (real compute)")
	fs.IntVar(&o.Engines, "engines", gateway.DefaultEngines, "engines in the pool: requests run through the model at most this many at once")
	fs.IntVar(&o.ChunkTokens, "chunk-tokens", gateway.DefaultChunkTokens, "prompt chunk in tokens")
	fs.StringVar(&maxBody, "max-body", "64MiB", "largest request body")
	fs.IntVar(&o.MaxNewTokens, "max-new-tokens", gateway.DefaultMaxNewTokens, "largest max_new_tokens a request may ask")
	fs.StringVar(&o.Redis, "redis", "", "the embedding cache's Redis at `HOST:PORT` (none: every lookup off)")
	fs.StringVar(&o.Namespace, "namespace", gateway.DefaultNamespace, "prefix of the cache's keys (NS:{TENANT}:emb:HASH)")
	fs.DurationVar(&ttl, "cache-ttl", gateway.DefaultCacheTTL, "each cache entry's time to live (the field report: at most 15m)")
	fs.DurationVar(&window, "cache-window", 0, "TTL window the cache's entries are grouped in (default: a quarter of the TTL)")
	fs.DurationVar(&sweep, "cache-sweep", 0, "how often the cache's namespaced eviction runs (default: the window)")
	fs.IntVar(&o.EmbeddingDims, "embedding-dims", gateway.DefaultEmbeddingDims, "a prompt's embedding, in float32s")
	fs.IntVar(&o.IndexEntries, "index-entries", gateway.DefaultIndexEntries, "documents the document index keeps")
	fs.IntVar(&o.TokenizerCache, "tokenizer-cache", gateway.DefaultTokenizerCache, "entries of the (fixed) tokenizer's encode cache")
	fs.BoolVar(&o.Leaks.Substring, "leak-substring", false, "leak: the document index keeps a slice of each body, and so the whole body (field report §5)")
	fs.BoolVar(&o.Leaks.Cache, "leak-cache", false, "leak: embedding cache entries without a TTL, never evicted (field report §4.1)")
	fs.BoolVar(&o.Leaks.Tokenizer, "leak-tokenizer", false, "leak: the tokenizer's encode cache unbounded, a fresh key per call")
	fs.BoolVar(&o.Leaks.Chunks, "leak-chunks", false, "each prompt chunk copied into a buffer of its own: the chunk allocation rate the field report alerts on")
	fs.BoolVar(&leaky, "leaky", false, "every leak above")
	fs.IntVar(&memProfileRate, "mem-profile-rate", 0, "runtime.MemProfileRate: sample an allocation every `BYTES` on average (0: Go's 512 KiB; 1: every one, exact heap profiles for linger watch at a cost)")
	fs.StringVar(&lingerURL, "linger", "", "post the probe's events to the Linger server at `URL`")
	fs.StringVar(&token, "linger-token", "", "the Linger server's token (default $LINGER_TOKEN)")
	fs.StringVar(&probeName, "probe-name", "gateway", "the probe's name: the server's live source and trace are named after it")
	fs.StringVar(&trace, "trace", "", "write the probe's events to the trace `FILE` (.ltrace) instead of a server")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if leaky {
		o.Leaks = gateway.Leaks{Substring: true, Cache: true, Tokenizer: true, Chunks: true}
	}
	if memProfileRate < 0 {
		return fmt.Errorf("%w: --mem-profile-rate %d: want 0 or more", errUsage, memProfileRate)
	}
	if memProfileRate > 0 {
		runtime.MemProfileRate = memProfileRate
	}
	n, err := units.Parse(maxBody)
	if err != nil {
		return fmt.Errorf("%w: --max-body: %v", errUsage, err)
	}
	o.MaxBodyBytes = int64(n)
	o.CacheTTL, o.Window, o.Sweep = ttl, window, sweep
	if lingerURL != "" && trace != "" {
		return fmt.Errorf("%w: give --linger or --trace, not both", errUsage)
	}
	if token == "" {
		token = os.Getenv("LINGER_TOKEN")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	o.Logger = log

	if ttl > 15*time.Minute {
		log.Warn("--cache-ttl is over the field report's 15 minutes", "ttl", ttl)
	}
	l, err := listen(addr, allowRemote)
	if err != nil {
		return err
	}
	defer l.Close()

	// The probe always counts (its metrics are on /metrics); it records
	// events for a Linger server or a trace file when given one.
	var tw *timeline.Writer
	popts := probe.Options{Name: probeName, Logger: log}
	if trace != "" {
		if tw, err = timeline.Create(trace); err != nil {
			return err
		}
		popts.Sink = tw
	}
	p, err := probe.New(popts)
	if err != nil {
		return err
	}
	if lingerURL != "" {
		if err := p.Dial(lingerURL, token); err != nil {
			return err
		}
	}
	o.Probe = p
	g, err := gateway.New(o)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(stdout, "gateway: %s on %s, listening on http://%s/\n", o.Model, o.Device, l.Addr())
	log.Info("gateway ready", "addr", l.Addr().String(), "redis", o.Redis, "leaks", fmt.Sprintf("%+v", o.Leaks), "linger", lingerURL, "trace", trace)

	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	err = errors.Join(err, g.Close(), p.Close())
	if tw != nil {
		err = errors.Join(err, tw.Close())
	}
	return err
}

// listen listens on addr, refusing an address beyond loopback unless
// allowRemote.
func listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --addr %q: %v", errUsage, addr, err)
	}
	if !allowRemote {
		ip := net.ParseIP(host)
		if !(host == "localhost" || ip != nil && ip.IsLoopback()) {
			return nil, fmt.Errorf("%w: --addr %s listens beyond loopback, where pprof and metrics would be open to anyone: add --allow-remote to mean it", errUsage, addr)
		}
	}
	return net.Listen("tcp", addr)
}
