package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"linger/notebooks/contents"
	"linger/notebooks/kernel"
	"linger/notebooks/kernel/proc"
	"linger/server"
)

// runServe is the notebook server: the Jupyter Server API on --addr
// (127.0.0.1 only unless told otherwise), kernels as child processes,
// notebooks under --dir. It prints the URL with the token on stdout, and
// on SIGINT or SIGTERM stops accepting, shuts every kernel down and
// returns.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	dir := fs.String("dir", ".", "notebook root directory")
	addr := fs.String("addr", "127.0.0.1:8888", "listen address (port 0 picks a free port)")
	token := fs.String("token", "", "auth token (default: a random one, printed with the URL)")
	traceDir := fs.String("trace-dir", "", "where kernel traces go (default: DIR/.linger/traces)")
	baseURL := fs.String("base-url", "/", "path prefix the server is mounted at")
	maxOutput := fs.Int("max-output", proc.DefaultMaxOutput, "largest result or display of a cell, in bytes; a larger one is replaced by a notice (print output is streamed whatever its size)")
	msgRate := fs.Float64("iopub-msg-rate-limit", server.DefaultIOPubMsgRateLimit, "iopub messages per second one client may receive before its output is dropped with a notice (0: no limit)")
	dataRate := fs.Float64("iopub-data-rate-limit", server.DefaultIOPubDataRateLimit, "stream output bytes per second one client may receive before its output is dropped with a notice (0: no limit)")
	rateWindow := fs.Duration("rate-limit-window", server.DefaultRateLimitWindow, "the window the iopub rates are averaged over")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := filepath.Abs(*dir)
	if err != nil {
		return fmt.Errorf("notebook dir %q: %w", *dir, err)
	}
	store, err := contents.New(root)
	if err != nil {
		return err
	}
	defer store.Close()
	if *traceDir == "" {
		*traceDir = filepath.Join(root, ".linger", "traces")
	}
	if err := os.MkdirAll(*traceDir, 0o755); err != nil {
		return fmt.Errorf("trace dir: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the linger binary for kernels: %w", err)
	}
	if *token == "" {
		*token = server.NewToken()
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Saves killed mid-way (kill -9, power loss) leave their temporary
	// files; a minute old, no save of a live server is still writing one.
	removed, err := store.RemoveStaleTemps(time.Minute)
	if len(removed) > 0 {
		log.Info("removed temporary files of interrupted saves", "files", removed)
	}
	if err != nil {
		log.Warn("remove temporary files of interrupted saves", "err", err)
	}
	specs := kernelSpecs(ctx, exe, kernel.ProbeTimeout, log)
	mgr := kernel.NewManager(kernel.ManagerOptions{Specs: specs, TraceDir: *traceDir, Dir: root,
		Env: []string{fmt.Sprintf("%s=%d", proc.MaxOutputEnv, *maxOutput)}})
	defer mgr.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := server.New(server.Options{
		Dir: root, Token: *token, Manager: mgr, Contents: store,
		Registerer: reg, Gatherer: reg, Logger: log, BaseURL: *baseURL, TraceDir: *traceDir,
		IOPubMsgRateLimit: noLimit(*msgRate), IOPubDataRateLimit: noLimit(*dataRate), RateLimitWindow: *rateWindow,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := newHTTPServer(srv.Handler(), log, defaultTimeouts)
	// Tests and make run read this line.
	fmt.Fprintln(stdout, serveURL(ln.Addr(), *baseURL, *token))
	log.Info("serving", "dir", root, "addr", ln.Addr().String(), "traces", *traceDir)
	return serveUntilDone(ctx, hs, ln, mgr, log)
}

// noLimit maps a rate flag, where 0 means no limit as in Jupyter, to
// server.Options, where it means the default.
func noLimit(rate float64) float64 {
	if rate <= 0 {
		return -1
	}
	return rate
}

// kernelSpecs are the kernels serve offers: linger's own (exe kernel),
// and the CUDA kernel when linger-cuda sits beside exe or on PATH and its
// probe answers within timeout. It logs one line saying which GPU the
// CUDA kernel has, or why there is none.
func kernelSpecs(ctx context.Context, exe string, timeout time.Duration, log *slog.Logger) []kernel.Spec {
	specs := []kernel.Spec{kernel.LingerSpec(exe, "kernel")}
	cuda, gpu, err := kernel.DiscoverCUDA(ctx, exe, timeout)
	switch {
	case errors.Is(err, kernel.ErrNoCUDABinary):
		log.Info("no CUDA kernel: kernelspec "+kernel.CUDASpecName+" not offered", "reason", err.Error())
	case err != nil:
		log.Warn("no CUDA kernel: kernelspec "+kernel.CUDASpecName+" not offered", "reason", err.Error())
	default:
		log.Info("CUDA kernel: kernelspec "+kernel.CUDASpecName, "binary", cuda.Argv[0], "gpu", gpu.String())
		specs = append(specs, cuda)
	}
	return specs
}

// serveURL is the URL to open: the server at addr, reached on 127.0.0.1
// when it listens on every interface, with the token to log in.
func serveURL(addr net.Addr, baseURL, token string) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("http://%s%s?token=%s", net.JoinHostPort(host, port), baseURL, token)
}

// httpTimeouts bound how long a connection may hold the server without
// sending a request: a slow client dribbling its headers, or a kept-alive
// connection with nothing more to ask. Neither limits a request in flight
// (a large save, a websocket).
type httpTimeouts struct {
	readHeader time.Duration // from a request's first byte to its last header
	idle       time.Duration // between requests on a kept-alive connection
}

// defaultTimeouts are serve's; tests shorten them.
var defaultTimeouts = httpTimeouts{readHeader: 10 * time.Second, idle: 2 * time.Minute}

// newHTTPServer is the http.Server serve runs h with.
func newHTTPServer(h http.Handler, log *slog.Logger, t httpTimeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.readHeader,
		IdleTimeout:       t.idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serveUntilDone serves hs on ln until it fails or ctx is done, then
// closes the kernels and shuts hs down, waiting up to 5s for requests in
// flight.
func serveUntilDone(ctx context.Context, hs *http.Server, ln net.Listener, mgr *kernel.Manager, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Websockets are hijacked and not waited for by Shutdown; closing the
	// kernels ends their subscriptions, which closes them.
	if err := mgr.Close(); err != nil {
		log.Warn("close kernels", "err", err)
	}
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
