package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"linger/engine/device"
	"linger/internal/serverinfo"
	"linger/internal/units"
	"linger/kernel"
	"linger/kernel/zmqkernel"
	"linger/notebooks/contents"
	"linger/server"
	"linger/server/hub"
	"linger/server/kernels"
	"linger/timeline/torchsnap"
)

// minKernelMemory is the smallest --kernel-memory: a kernel's runtime,
// its event buffers and a small model's weights.
const minKernelMemory = 64 << 20

// minTokenLen is the shortest --token serve takes without
// --allow-short-token.
const minTokenLen = 16

// serveConfig is what serve and singleuser run the server with.
type serveConfig struct {
	dir, addr, token, baseURL string
	allowRemote               bool
	allowHosts                []string
	kernelFlags
	// hub, for singleuser, is the spawner's environment; nil for serve.
	hub *hub.Config
	// page, if set, is the page the printed URLs open (linger open's
	// timeline), below the base URL; and opened, if set, is called with
	// the first of them once the server listens.
	page   string
	opened func(url string)
	// rules, read from rulesFile, categorize the blocks of the PyTorch
	// snapshots the server imports (uploaded, or watched in the trace
	// directory) before the built-in ones; nil for those alone.
	rules     *torchsnap.RuleSet
	rulesFile string
	// start, if set, is called once the server is made, before it
	// listens, with the registry of its /metrics and its trace
	// directory (linger watch adds its live sources there); the stop it
	// returns runs when the server has stopped serving, before it
	// closes.
	start func(srv *server.Server, reg prometheus.Registerer, traceDir string) (stop func(), err error)
}

// kernelFlags are the flags serve and singleuser share: the kernels'
// limits, where traces go and the metrics listener.
type kernelFlags struct {
	traceDir string
	// kernelTraceDir is where the kernels Jupyter frontends start write
	// their traces, listed beside traceDir's.
	kernelTraceDir string
	maxOutput      int
	msgRate        float64
	dataRate       float64
	rateWindow     time.Duration
	kernelMemory   uint64
	metricsAddr    string
	// The PyTorch snapshots the server imports (server/imports.go).
	watchSnapshots time.Duration
	maxSnapshot    uint64
	// The probes inside services that stream to the server (server/probes.go).
	probeIdle     time.Duration
	maxProbeBatch uint64
}

func (k *kernelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.traceDir, "trace-dir", "", "where kernel traces go (default: DIR/.linger/traces)")
	fs.StringVar(&k.kernelTraceDir, "kernel-trace-dir", "", "the traces that kernels started by Jupyter frontends (linger kernelspec) write, listed and opened beside the server's own (default: $LINGER_TRACE_DIR, else ~/.local/share/linger/traces)")
	fs.IntVar(&k.maxOutput, "max-output", kernel.DefaultMaxOutput, "largest result or display of a cell, in bytes; a larger one is replaced by a notice (print output is streamed whatever its size)")
	fs.Float64Var(&k.msgRate, "iopub-msg-rate-limit", server.DefaultIOPubMsgRateLimit, "iopub messages per second one client may receive before its output is dropped with a notice (0: no limit)")
	fs.Float64Var(&k.dataRate, "iopub-data-rate-limit", server.DefaultIOPubDataRateLimit, "stream output bytes per second one client may receive before its output is dropped with a notice (0: no limit)")
	fs.DurationVar(&k.rateWindow, "rate-limit-window", server.DefaultRateLimitWindow, "the window the iopub rates are averaged over")
	fs.Func("kernel-memory", "each kernel's memory budget, its Go heap and cpu tensors together (`SIZE`: 8GiB, 512MiB); a cell over it stops with MemoryError, a kernel far over it is stopped (default: 3/8 of the machine's memory or of its cgroup's limit)", func(s string) error {
		n, err := units.Parse(s)
		if err == nil && n < minKernelMemory {
			err = fmt.Errorf("%s is under the %s a kernel needs", s, units.Format(minKernelMemory))
		}
		k.kernelMemory = n
		return err
	})
	fs.DurationVar(&k.watchSnapshots, "watch-snapshots", 2*time.Second, "how often to look in the trace directory for PyTorch memory snapshots (.pickle, .pkl, .json, either gzipped) that appeared or changed, each imported into the trace of its name once it stops growing (0: never)")
	k.maxSnapshot = server.DefaultMaxSnapshotBytes
	fs.Func("max-snapshot-size", "the largest PyTorch snapshot the root page may upload (`SIZE`, default 64GiB)", func(s string) error {
		n, err := units.Parse(s)
		k.maxSnapshot = n
		return err
	})
	fs.DurationVar(&k.probeIdle, "probe-idle", server.DefaultProbeIdle, "end the trace of a probe that sent nothing for this long (it begins a new one when it comes back)")
	k.maxProbeBatch = server.DefaultMaxProbeBatchBytes
	fs.Func("max-probe-batch", "the largest batch of events a probe may send at once (`SIZE`, default 8MiB)", func(s string) error {
		n, err := units.Parse(s)
		if err == nil && n == 0 {
			err = errors.New("a batch bound of 0 refuses every probe")
		}
		k.maxProbeBatch = n
		return err
	})
	fs.StringVar(&k.metricsAddr, "metrics-addr", "", "also serve GET /metrics, and nothing else, without a token on `HOST:PORT` (for a cluster's Prometheus; the main address's /metrics needs the login)")
}

// runServe is the notebook server: the Jupyter Server API on --addr
// (loopback only unless --allow-remote), kernels as child processes,
// notebooks under --dir. It prints the URL with the token on stdout (one
// line per address when it listens on every interface), and on SIGINT or
// SIGTERM stops accepting, shuts every kernel down and returns.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var c serveConfig
	fs.StringVar(&c.dir, "dir", ".", "notebook root directory")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8888", "listen address (port 0 picks a free port); beyond loopback only with --allow-remote")
	fs.StringVar(&c.token, "token", "", fmt.Sprintf("auth token, at least %d characters (default: a random one, printed with the URL)", minTokenLen))
	fs.StringVar(&c.baseURL, "base-url", "/", "path prefix the server is mounted at")
	fs.BoolVar(&c.allowRemote, "allow-remote", false, "listen beyond loopback (--addr :PORT, 0.0.0.0 or a network address) and answer requests whatever their Host header, as Jupyter's allow_remote_access")
	fs.Func("allow-host", "also answer requests whose Host header is `NAME` (repeatable); without it only localhost, 127.0.0.0/8 and [::1] are answered, against DNS rebinding", func(s string) error {
		if s == "" {
			return errors.New("empty host name")
		}
		c.allowHosts = append(c.allowHosts, s)
		return nil
	})
	c.kernelFlags.register(fs)
	allowShort := fs.Bool("allow-short-token", false, fmt.Sprintf("accept a --token under %d characters", minTokenLen))
	fs.StringVar(&c.rulesFile, "rules", "", "categorize the blocks of the PyTorch snapshots this server imports (uploaded without rules of their own, or watched) by the rules in `FILE` (JSON, docs/pytorch.md) before the built-in ones")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if c.rules, err = snapRules(c.rulesFile); err != nil {
		return err
	}
	if c.token != "" && len(c.token) < minTokenLen && !*allowShort {
		return fmt.Errorf("%w: --token has %d characters, under %d: anyone could guess it; give a longer one, none for a random one, or --allow-short-token", errUsage, len(c.token), minTokenLen)
	}
	if host, _, err := net.SplitHostPort(c.addr); err == nil {
		if err := checkBind(c.addr, host, c.allowRemote); err != nil {
			return err
		}
	}
	return serve(ctx, c, stdout, stderr)
}

// runSingleuser is the notebook server as a JupyterHub single-user
// server, configured by the environment the hub's spawner sets (package
// server/hub): it listens where JUPYTERHUB_SERVICE_URL says, under
// JUPYTERHUB_SERVICE_PREFIX, with notebooks in JUPYTERHUB_ROOT_DIR or
// the working directory, lets in whom the hub's OAuth says may use it,
// and reports its activity to the hub.
func runSingleuser(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("singleuser", stderr)
	var c serveConfig
	c.kernelFlags.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: singleuser takes flags only, not %q: the hub's environment says where to serve", errUsage, fs.Arg(0))
	}
	cfg, err := hub.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	c.hub = &cfg
	c.addr, c.baseURL, c.dir = cfg.Addr(), cfg.Prefix, cfg.RootDir
	if c.dir == "" {
		c.dir = "."
	}
	// The hub's proxy (or the cluster's ingress) decides who reaches the
	// address, with the public Host; the hub's login decides who enters.
	c.allowRemote = true
	return serve(ctx, c, stdout, stderr)
}

// serve runs the server of c until ctx is done or SIGINT or SIGTERM.
func serve(ctx context.Context, c serveConfig, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := filepath.Abs(c.dir)
	if err != nil {
		return fmt.Errorf("notebook dir %q: %w", c.dir, err)
	}
	store, err := contents.New(root)
	if err != nil {
		return err
	}
	defer store.Close()
	if c.traceDir == "" {
		c.traceDir = filepath.Join(root, ".linger", "traces")
	}
	if err := os.MkdirAll(c.traceDir, 0o755); err != nil {
		return fmt.Errorf("trace dir: %w", err)
	}
	if c.kernelTraceDir == "" {
		c.kernelTraceDir = os.Getenv(zmqkernel.TraceDirEnv)
	}
	if c.kernelTraceDir == "" {
		c.kernelTraceDir = zmqkernel.DefaultTraceDir()
	}
	if c.kernelTraceDir, err = filepath.Abs(c.kernelTraceDir); err != nil {
		return fmt.Errorf("kernel trace dir: %w", err)
	}
	// Where kernels' plots find this server's traces (serverinfo); one
	// directory for both is the server's own, whose traces it renames and
	// deletes.
	kernelTraces := c.kernelTraceDir
	if serverinfo.SameDir(c.kernelTraceDir, c.traceDir) {
		c.kernelTraceDir = ""
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the linger binary for kernels: %w", err)
	}
	if c.token == "" && c.hub == nil {
		c.token = server.NewToken()
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
	if c.kernelMemory == 0 {
		c.kernelMemory = kernel.DefaultMemory(device.HostLimit())
	}
	log.Info("kernel memory budget", "each", units.Format(c.kernelMemory), "host", units.Format(device.HostLimit()))
	specs := kernelSpecs(ctx, exe, kernels.ProbeTimeout, log)
	mgr := kernels.NewManager(kernels.ManagerOptions{Specs: specs, TraceDir: c.traceDir, Dir: root, Memory: c.kernelMemory,
		Env: []string{fmt.Sprintf("%s=%d", kernel.MaxOutputEnv, c.maxOutput)}})
	defer mgr.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := server.Options{
		Dir: root, Token: c.token, Manager: mgr, Contents: store,
		Registerer: reg, Gatherer: reg, Logger: log, BaseURL: c.baseURL, TraceDir: c.traceDir, KernelTraceDir: c.kernelTraceDir,
		IOPubMsgRateLimit: noLimit(c.msgRate), IOPubDataRateLimit: noLimit(c.dataRate), RateLimitWindow: c.rateWindow,
		AllowRemote: c.allowRemote, AllowHosts: c.allowHosts,
		WatchSnapshots: c.watchSnapshots, MaxSnapshotBytes: int64(min(c.maxSnapshot, math.MaxInt64)),
		ProbeIdle: c.probeIdle, MaxProbeBatchBytes: int64(min(c.maxProbeBatch, math.MaxInt64)),
	}
	if c.rules != nil {
		opts.SnapshotRules, opts.SnapshotRulesName = c.rules, filepath.Base(c.rulesFile)
	}
	var auth *hub.Auth
	if c.hub != nil {
		auth = hub.NewAuth(*c.hub, nil)
		opts.Hub, opts.DefaultURL = auth, c.hub.DefaultURL
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	defer srv.Close()
	if c.start != nil {
		stop, err := c.start(srv, reg, c.traceDir)
		if err != nil {
			return err
		}
		defer stop()
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// A name in --addr is judged by the address it bound.
	if err := checkBind(c.addr, ln.Addr().(*net.TCPAddr).IP.String(), c.allowRemote); err != nil {
		ln.Close()
		return err
	}
	hs := newHTTPServer(srv.Handler(), log, defaultTimeouts)
	var extra []*http.Server
	if c.metricsAddr != "" {
		mln, err := net.Listen("tcp", c.metricsAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen for metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ms := newHTTPServer(mux, log, defaultTimeouts)
		go func() { _ = ms.Serve(mln) }()
		extra = append(extra, ms)
		log.Info("serving metrics without a token", "addr", mln.Addr().String(), "path", "/metrics")
	}
	if c.hub != nil {
		// The hub knows the URL; a token-bearing URL would be no use.
		fmt.Fprintf(stdout, "http://%s%s\n", ln.Addr(), c.baseURL)
		log.Info("serving as a JupyterHub single-user server", "user", c.hub.User, "dir", root, "addr", ln.Addr().String(),
			"prefix", c.baseURL, "hub", c.hub.APIURL, "traces", c.traceDir, "activity_interval", c.hub.ActivityInterval)
		go auth.RunActivity(ctx, srv.LastActivity, log)
	} else {
		// Tests and make run read the first line.
		urls := serveURLs(ln.Addr(), c.baseURL+c.page, c.token)
		for _, u := range urls {
			fmt.Fprintln(stdout, u)
		}
		if c.opened != nil && len(urls) > 0 {
			c.opened(urls[0])
		}
		if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			log.Warn("listening beyond loopback (--allow-remote): anyone who reaches this address and has the token can run code here", "addr", ln.Addr().String(), "urls", len(urls))
		}
		log.Info("serving", "dir", root, "addr", ln.Addr().String(), "traces", c.traceDir, "jupyter_kernel_traces", c.kernelTraceDir)
		// Kernels that Jupyter frontends started find this server here,
		// to link their plots to its timeline (package serverinfo).
		if len(urls) > 0 {
			u, _, _ := strings.Cut(urls[0], "?token=")
			u, _, _ = strings.Cut(u, "&token=")
			if remove, err := serverinfo.Write(serverinfo.Dir(), serverinfo.Info{URL: strings.TrimSuffix(u, c.page), PID: os.Getpid(), KernelTraceDir: kernelTraces}); err != nil {
				log.Warn("kernels started by Jupyter frontends will not link to this server", "reason", err.Error())
			} else {
				defer remove()
			}
		}
	}
	return serveUntilDone(ctx, hs, ln, mgr, log, extra...)
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
func kernelSpecs(ctx context.Context, exe string, timeout time.Duration, log *slog.Logger) []kernels.Spec {
	specs := []kernels.Spec{kernels.LingerSpec(exe, "kernel")}
	cuda, gpu, err := kernels.DiscoverCUDA(ctx, exe, timeout)
	switch {
	case errors.Is(err, kernels.ErrNoCUDABinary):
		log.Info("no CUDA kernel: kernelspec "+kernels.CUDASpecName+" not offered", "reason", err.Error())
	case err != nil:
		log.Warn("no CUDA kernel: kernelspec "+kernels.CUDASpecName+" not offered", "reason", err.Error())
	default:
		log.Info("CUDA kernel: kernelspec "+kernels.CUDASpecName, "binary", cuda.Argv[0], "gpu", gpu.String())
		specs = append(specs, cuda)
	}
	return specs
}

// checkBind refuses host, the host of --addr or the address it bound,
// when it reaches beyond loopback (empty, unspecified or another address)
// and allowRemote is false. A name passes: the address it binds is judged.
func checkBind(addr, host string, allowRemote bool) error {
	if allowRemote {
		return nil
	}
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || ip.IsLoopback()) {
		return nil
	}
	where := "on " + host
	if host == "" || ip.IsUnspecified() {
		where = "on every interface"
	}
	return fmt.Errorf("%w: --addr %s listens %s, beyond loopback: anyone who reaches it with the token can run code on this machine; "+
		"pass --allow-remote to mean it, or listen on 127.0.0.1", errUsage, addr, where)
}

// serveURLs are the URLs to open, with the token to log in: the server at
// addr, or, when it listens on every interface, at each address of the
// machine's interfaces it answers on (IPv4 only for 0.0.0.0), network
// addresses first, loopback last. IPv6 link-local addresses, which need a
// zone, are left out.
func serveURLs(addr net.Addr, baseURL, token string) []string {
	tcp := addr.(*net.TCPAddr)
	port := strconv.Itoa(tcp.Port)
	sep := "?"
	if strings.Contains(baseURL, "?") { // a page with its query (linger open's ranks)
		sep = "&"
	}
	url := func(ip net.IP) string {
		return fmt.Sprintf("http://%s%s%stoken=%s", net.JoinHostPort(ip.String(), port), baseURL, sep, token)
	}
	if !tcp.IP.IsUnspecified() {
		return []string{url(tcp.IP)}
	}
	var network, loopback []string
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLinkLocalUnicast() || tcp.IP.To4() != nil && n.IP.To4() == nil {
			continue
		}
		if n.IP.IsLoopback() {
			loopback = append(loopback, url(n.IP))
		} else {
			network = append(network, url(n.IP))
		}
	}
	if len(network)+len(loopback) == 0 {
		return []string{url(net.IPv4(127, 0, 0, 1))}
	}
	return append(network, loopback...)
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
func serveUntilDone(ctx context.Context, hs *http.Server, ln net.Listener, mgr *kernels.Manager, log *slog.Logger, extra ...*http.Server) error {
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
	for _, x := range extra {
		_ = x.Shutdown(sctx)
	}
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
