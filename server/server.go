package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/felixge/fgprof"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"linger/notebooks/contents"
	"linger/notebooks/msg"
	"linger/server/httperr"
	"linger/server/hub"
	"linger/server/kernels"
	"linger/server/live"
	"linger/timeline/torchsnap"
	"linger/timeline/traces"
	"linger/web"
)

// Version is the Jupyter Server API version Linger answers GET /api with.
// Clients compare it to decide which features exist; Linger implements the
// paths of jupyter_server 2.x.
const Version = "2.14.0"

// Default limits.
const (
	DefaultMaxBodyBytes    = 100 << 20 // contents saves
	DefaultMaxMessageBytes = 64 << 20  // one websocket message
)

// Options configures a Server.
type Options struct {
	// Dir is the notebook root, shown on the placeholder pages.
	Dir string
	// Token is the secret every API request must carry; it must not be
	// empty (serve generates one).
	Token string
	// Manager runs the kernels. Required.
	Manager *kernels.Manager
	// Contents stores the notebooks. Required.
	Contents *contents.Store
	// Registerer receives the server's metrics; nil means a fresh registry
	// of the server's own (never the global one).
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil means the registry made for a nil
	// Registerer, or prometheus.DefaultGatherer when Registerer is the
	// default registerer.
	Gatherer prometheus.Gatherer
	// Logger logs failed requests and connections; nil discards.
	Logger *slog.Logger
	// BaseURL is the path prefix the server is mounted at, "/" by default.
	BaseURL string
	// MaxBodyBytes limits a request body (contents saves); 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxMessageBytes limits one websocket message from a client; 0 means
	// DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// IOPubMsgRateLimit and IOPubDataRateLimit are Jupyter Server's
	// iopub_msg_rate_limit and iopub_data_rate_limit: the messages, and
	// the stream bytes, per second one client may receive, averaged over
	// RateLimitWindow, above which its output is dropped with a notice
	// (see rateLimit). 0 means DefaultIOPubMsgRateLimit and
	// DefaultIOPubDataRateLimit; a negative value, no limit.
	IOPubMsgRateLimit  float64
	IOPubDataRateLimit float64
	// RateLimitWindow is Jupyter Server's rate_limit_window; 0 means
	// DefaultRateLimitWindow.
	RateLimitWindow time.Duration
	// TraceDir holds saved traces (the kernels' own among them), served
	// by name under /api/timeline/traces/; "" serves none.
	TraceDir string
	// KernelTraceDir holds the traces of the kernels Jupyter frontends
	// started elsewhere (linger kernel --connection-file): listed and
	// opened beside TraceDir's (a name in TraceDir first), never renamed
	// or deleted from here, since their writer is not this server. "":
	// none.
	KernelTraceDir string
	// MaxSnapshotBytes bounds a PyTorch snapshot uploaded to
	// /api/snapshots (streamed to TraceDir, never held in memory); 0
	// means DefaultMaxSnapshotBytes.
	MaxSnapshotBytes int64
	// WatchSnapshots, if positive, is how often TraceDir is looked at for
	// PyTorch snapshots (.pickle, .pkl, .json, either gzipped) that
	// appeared or changed: each is imported, once it has stopped growing,
	// into the trace of its name beside it (see imports.go).
	WatchSnapshots time.Duration
	// SnapshotRules categorize the blocks of every snapshot this server
	// imports (watched, or uploaded without rules of its own) before the
	// built-in ones; nil means the built-in rules alone. SnapshotRulesName
	// is what the root page calls them (the rules file's name).
	SnapshotRules     *torchsnap.RuleSet
	SnapshotRulesName string
	// AllowRemote serves requests whatever their Host header names, as
	// Jupyter Server's allow_remote_access does. When false, the default,
	// only loopback Hosts (localhost, 127.0.0.0/8, [::1], any port) and
	// AllowHosts are served; others get 403 (see checkHost).
	AllowRemote bool
	// AllowHosts are further host names (without port) served when
	// AllowRemote is false, as Jupyter Server's local_hostnames.
	AllowHosts []string
	// Hub, when not nil, makes the server a JupyterHub single-user server:
	// users log in through the hub (see hubmode.go) and Token is not used.
	Hub *hub.Auth
	// ProbeIdle ends the trace of a probe that posted no batch for that
	// long (a probe posts one at least every 30 s while it runs); 0
	// means DefaultProbeIdle.
	ProbeIdle time.Duration
	// MaxProbeBatchBytes bounds the body of a probe's batch; 0 means
	// DefaultMaxProbeBatchBytes.
	MaxProbeBatchBytes int64
	// DefaultURL is where the root page leads, relative to BaseURL (a
	// JupyterHub's default_url, e.g. "/tree"); "" or "/" shows the tree.
	DefaultURL string
}

// Server serves the Jupyter Server API for one Manager and Store. Its
// Handler may serve any number of concurrent requests.
type Server struct {
	opts     Options
	patterns []string // the routes' patterns, as routes registered them (doc_test.go)
	log      *slog.Logger
	errw     httperr.Writer // every route's errors, through writeError
	kernels  kernelManager
	contents contentStore
	metrics  *metrics
	gatherer prometheus.Gatherer
	handler  http.Handler
	live     *live.Handler
	traces   *traces.Set // every trace the routes answer from, and what was derived from it
	started  time.Time
	imports  importer        // PyTorch snapshots uploaded or watched, imported as traces (imports.go)
	sources  sourceSet       // live traces no kernel writes: watched services, probes (sources.go)
	rules    rulesKept       // rules files read for snapshot uploads to name (imports.go)
	probes   probeSet        // the probes posting their events (probes.go)
	ctx      context.Context // ends at Close: the imports under way stop
	stop     context.CancelFunc

	sessions *sessionStore

	// exportSizes are the memory_viz JSON sizes measured lately, for
	// GET …/exports (exports.go).
	exportSizes sizeCache

	mu    sync.Mutex
	conns map[string]int // kernel id → open websocket connections
	last  time.Time      // last API activity
}

// New returns a Server for opts. It fails if the token is empty or the
// metrics cannot be registered (a second Server on the same Registerer).
func New(opts Options) (*Server, error) {
	if opts.Manager == nil {
		return nil, errors.New("server: no kernel manager")
	}
	if opts.Contents == nil {
		return nil, errors.New("server: no contents store")
	}
	return newServer(opts, managerKernels{opts.Manager}, storeContents{opts.Contents})
}

// newServer is New with the kernels and contents behind the interfaces
// the handlers use, so tests can run the handlers on fakes.
func newServer(opts Options, ks kernelManager, cs contentStore) (*Server, error) {
	if opts.Token == "" && opts.Hub == nil {
		return nil, errors.New("server: empty token")
	}
	if opts.BaseURL == "" {
		opts.BaseURL = "/"
	}
	if !strings.HasPrefix(opts.BaseURL, "/") || !strings.HasSuffix(opts.BaseURL, "/") {
		return nil, fmt.Errorf("server: base URL %q must start and end with /", opts.BaseURL)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.IOPubMsgRateLimit == 0 {
		opts.IOPubMsgRateLimit = DefaultIOPubMsgRateLimit
	}
	if opts.IOPubDataRateLimit == 0 {
		opts.IOPubDataRateLimit = DefaultIOPubDataRateLimit
	}
	if opts.RateLimitWindow <= 0 {
		opts.RateLimitWindow = DefaultRateLimitWindow
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg, gat := opts.Registerer, opts.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gat = r, r
	}
	if gat == nil {
		if g, ok := reg.(prometheus.Gatherer); ok {
			gat = g
		} else {
			gat = prometheus.DefaultGatherer
		}
	}
	s := &Server{
		opts: opts, log: log, kernels: ks, contents: cs, gatherer: gat,
		started: time.Now(), last: time.Now(),
		sessions: newSessionStore(), conns: map[string]int{},
	}
	m, err := newMetrics(reg, s)
	if err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	s.metrics = m
	s.errw = httperr.Writer{Log: log, Paths: serverPaths(opts)}
	s.newLive()
	s.handler = s.checkHost(s.routes())
	if opts.Hub != nil {
		s.handler = s.hubHeaders(s.handler)
	}
	ctx, stop := context.WithCancel(context.Background())
	s.ctx, s.stop = ctx, stop
	if opts.WatchSnapshots > 0 && opts.TraceDir != "" {
		s.imports.start(func() { s.watchSnapshots(ctx, opts.WatchSnapshots) })
	}
	return s, nil
}

// Close stops the server's background work (following live traces,
// watching for snapshots) and waits for the snapshot imports under way.
// It does not shut kernels down: the Manager's owner does.
func (s *Server) Close() error {
	s.stop()
	s.imports.close()
	s.closeProbes()
	return errors.Join(s.live.Close(), s.traces.Close())
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// routes builds the mux. Every route needs the token but the API version,
// the favicon and the static assets, as in Jupyter Server; the pattern of
// each is the route label of its metrics.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mount := func(pattern string, h http.HandlerFunc, auth bool, outer ...func(http.Handler) http.Handler) {
		method, path, ok := strings.Cut(pattern, " ")
		if !ok {
			method, path = "", pattern
		}
		full := strings.TrimSuffix(s.opts.BaseURL, "/") + path
		if method != "" {
			full = method + " " + full
		}
		var hh http.Handler = h
		if prefix := strings.TrimSuffix(s.opts.BaseURL, "/"); prefix != "" {
			// Handlers (pprof's index among them) see paths from the root.
			hh = http.StripPrefix(prefix, hh)
		}
		if auth {
			hh = s.authenticate(hh)
		}
		for _, o := range outer {
			hh = o(hh)
		}
		mux.Handle(full, s.instrument(pattern, hh))
		s.patterns = append(s.patterns, pattern)
	}
	handle := func(pattern string, h http.HandlerFunc) { mount(pattern, h, true) }
	// open routes carry no secret and answer without the token.
	open := func(pattern string, h http.HandlerFunc) { mount(pattern, h, false) }

	if s.opts.Hub != nil {
		// The OAuth callback is where a login arrives, so it needs none.
		mux.Handle("GET "+s.opts.Hub.CallbackPath(), s.instrument("GET /oauth_callback", http.HandlerFunc(s.handleOAuthCallback)))
	}
	handle("GET /{$}", s.handleRoot)
	handle("GET /tree/{path...}", s.handleTree)
	handle("GET /notebooks/{path...}", s.handleNotebookPage)
	handle("GET /timeline/{name}", s.handleTimelinePage)
	handle("GET /timeline/live/{id}", s.handleLivePage)
	handle("GET /compare", s.handleComparePage)
	handle("GET /ranks", s.handleRanksPage)
	// Static assets carry no secret and are served without the token, as
	// Jupyter serves its own; their URLs are content-hashed.
	mux.Handle("GET "+strings.TrimSuffix(s.opts.BaseURL, "/")+"/static/",
		http.StripPrefix(strings.TrimSuffix(s.opts.BaseURL, "/")+"/static/", web.StaticHandler()))
	s.patterns = append(s.patterns, "GET /static/...")

	open("GET /favicon.ico", s.handleFavicon)
	open("GET /api", s.handleVersion)
	open("GET /api/{$}", s.handleVersion)
	handle("GET /api/status", s.handleStatus)
	handle("GET /api/me", s.handleMe)
	handle("GET /api/kernelspecs", s.handleKernelspecs)
	handle("GET /api/kernelspecs/{name}", s.handleKernelspec)

	handle("GET /api/kernels", s.handleKernelList)
	handle("POST /api/kernels", s.handleKernelStart)
	handle("GET /api/kernels/{id}", s.handleKernelGet)
	handle("DELETE /api/kernels/{id}", s.handleKernelDelete)
	handle("POST /api/kernels/{id}/interrupt", s.handleKernelInterrupt)
	handle("POST /api/kernels/{id}/restart", s.handleKernelRestart)
	handle("GET /api/kernels/{id}/channels", s.handleChannels)
	handle("GET /api/kernels/{id}/lingering", s.handleLingering)

	handle("GET /api/sessions", s.handleSessionList)
	handle("POST /api/sessions", s.handleSessionCreate)
	handle("GET /api/sessions/{id}", s.handleSessionGet)
	handle("PATCH /api/sessions/{id}", s.handleSessionPatch)
	handle("DELETE /api/sessions/{id}", s.handleSessionDelete)

	// Checkpoints hang below a path of any depth, so one pattern takes all
	// of /api/contents and handleContents splits the path.
	handle("/api/contents", s.handleContents)
	handle("/api/contents/{path...}", s.handleContents)

	// Timeline streams and queries (package live) behind the same token,
	// metrics and base URL as every other route.
	lm := http.NewServeMux()
	s.live.Register(lm, "")
	handle("GET /api/timeline/kernels/{id}/{what}", lm.ServeHTTP)
	handle("GET /api/timeline/sources/{id}/{what}", lm.ServeHTTP)
	handle("GET /api/timeline/sources", s.handleSources)
	handle("GET /api/timeline/sources/{id}/report", s.handleTimelineReport)
	handle("GET /api/timeline/sources/{id}/lingering", s.handleSourceLingering)
	handle("GET /api/timeline/sources/{id}/export", s.handleTimelineExport)
	handle("GET /api/timeline/sources/{id}/exports", s.handleTimelineExports)
	handle("GET /api/timeline/sources/{id}/segments", s.handleTimelineSegments)
	handle("GET /api/timeline/traces/{name}/{what}", lm.ServeHTTP)
	handle("POST /api/snapshots", s.handleSnapshotUpload)
	handle("POST /api/snapshots/rules", s.handleSnapshotRules)
	handle("GET /api/imports", s.handleImports)
	handle("GET /api/imports/{id}", s.handleImport)
	handle("GET /api/timeline/kernels/{id}/report", s.handleTimelineReport)
	handle("GET /api/timeline/traces/{name}/report", s.handleTimelineReport)
	handle("GET /api/timeline/traces/{name}/lingering", s.handleTraceLingering)
	handle("GET /api/timeline/kernels/{id}/export", s.handleTimelineExport)
	handle("GET /api/timeline/traces/{name}/export", s.handleTimelineExport)
	handle("GET /api/timeline/kernels/{id}/exports", s.handleTimelineExports)
	handle("GET /api/timeline/traces/{name}/exports", s.handleTimelineExports)
	handle("GET /api/timeline/kernels/{id}/segments", s.handleTimelineSegments)
	handle("GET /api/timeline/traces/{name}/segments", s.handleTimelineSegments)
	handle("GET /api/timeline/traces/{name}/file", s.handleTraceFile)
	handle("PATCH /api/timeline/traces/{name}", s.handleTraceRename)
	handle("DELETE /api/timeline/traces/{name}", s.handleTraceDelete)
	handle("GET /api/timeline/compare", s.handleCompare)
	handle("GET /api/timeline/ranks", s.handleRanks)
	// Probes post from other processes and machines: every refusal is
	// logged, the token's too.
	mount("POST /api/probes/{name}/events", s.handleProbeEvents, true, s.logRefusals)

	handle("/api/{rest...}", s.handleAPINotFound)

	handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	// pprof on this mux, never on http.DefaultServeMux, so it is behind
	// the token and absent from any other server in the process.
	handle("GET /debug/pprof/", pprof.Index)
	handle("GET /debug/pprof/cmdline", pprof.Cmdline)
	handle("GET /debug/pprof/profile", pprof.Profile)
	handle("GET /debug/pprof/symbol", pprof.Symbol)
	handle("POST /debug/pprof/symbol", pprof.Symbol)
	handle("GET /debug/pprof/trace", pprof.Trace)
	handle("GET /debug/fgprof", fgprof.Handler().ServeHTTP)
	return mux
}

// touch records API activity for /api/status.
func (s *Server) touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// connections returns the open websocket connections to a kernel.
func (s *Server) connections(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[id]
}

func (s *Server) addConn(id string, d int) {
	s.mu.Lock()
	s.conns[id] += d
	if s.conns[id] <= 0 {
		delete(s.conns, id)
	}
	s.mu.Unlock()
}

func (s *Server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": Version})
}

// handleFavicon answers the icon browsers ask for at /favicon.ico (the
// pages link web's SVG one; this is for those that ask anyway).
func (s *Server) handleFavicon(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Header().Set("Content-Type", "image/x-icon")
	http.ServeFileFS(w, r, web.Static, web.FaviconICO)
}

func (s *Server) handleAPINotFound(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, notFound("no API route %s %s", r.Method, r.URL.Path))
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	last := s.LastActivity()
	s.mu.Lock()
	n := 0
	for _, c := range s.conns {
		n += c
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"started":       msg.FormatDate(s.started),
		"last_activity": msg.FormatDate(last),
		"connections":   n,
		"kernels":       len(s.kernels.List()),
	})
}

// handleMe is the identity JupyterLab's UserManager asks for; Linger has
// one user, whoever holds the token, or the hub's user in single-user
// mode.
func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) {
	if u := hubUser(r.Context()); u != nil {
		initials := ""
		if u.Name != "" {
			initials = strings.ToUpper(u.Name[:1])
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"identity": map[string]any{
				"username": u.Name, "name": u.Name, "display_name": u.Name,
				"initials": initials, "avatar_url": nil, "color": nil,
			},
			"permissions": map[string]any{},
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"identity": map[string]any{
			"username": "linger", "name": "Linger", "display_name": "Linger",
			"initials": "L", "avatar_url": nil, "color": nil,
		},
		"permissions": map[string]any{},
	})
}

// ctxTimeout bounds the kernel operations a request waits for.
func ctxTimeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
