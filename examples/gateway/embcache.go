package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"linger/probe"
	"linger/timeline/event"
)

// The labels the cache records its objects and scopes under.
const (
	labelEntry  = "embedding cache entry"
	labelWindow = "embedding cache TTL window"
)

// Results of a cache lookup, as the response and the metrics name them.
const (
	cacheHit   = "hit"
	cacheMiss  = "miss"
	cacheError = "error" // Redis did not answer: served as a miss
	cacheOff   = "off"   // no Redis configured
)

// embCache keeps prompts' embeddings in Redis, one key per tenant and
// prompt: NS:{TENANT}:emb:HASH (the braces are Redis Cluster's hash tag:
// a tenant's keys share a slot, so its namespace is scanned on one node).
//
// Every entry is written with the TTL, and a sweep (every Options.Sweep)
// does the namespaced eviction: it SCANs NS:*:emb:* and UNLINKs the keys
// that have no TTL (a writer that forgot it, or one from before the
// policy), then asks Redis about every entry it wrote whose TTL has
// passed (EXISTS), freeing the probe object of each one that is gone and
// unlinking any that is still there. The leaky cache (Leaks.Cache) sets
// no TTL and never evicts; its sweep still asks, so that the probe says
// what Redis holds.
//
// Each entry is a probe object expected to die with the TTL window it
// was written in: a scope of kind batch, one per Options.Window, that
// ends once every entry written in it has passed its TTL and a sweep
// has asked Redis about each (so at the window's end + TTL + at most a
// sweep). An entry still in Redis then lingers, with its bytes and the
// stack that wrote it; one gone was freed before its window ended. While
// Redis does not answer, windows stay open: what it holds is not known.
type embCache struct {
	rdb    *redis.Client
	addr   string
	ns     string
	ttl    time.Duration
	window time.Duration
	sweep  time.Duration
	leaky  bool
	p      *probe.Probe
	log    *slog.Logger
	m      *metrics

	mu      sync.Mutex
	cur     *window
	windows []*window         // open, oldest first
	entries map[string]*entry // what this gateway wrote and Redis holds, as far as it knows
	up      bool              // Redis answered the last command
	checked time.Time         // when the last sweep that reached Redis began

	stop chan struct{}
	done chan struct{}
}

// window is a TTL window: the entries written from start to end are
// expected gone by end + TTL.
type window struct {
	s          *probe.Scope
	start, end time.Time
}

type entry struct {
	h        probe.Handle
	deadline time.Time // written + TTL: Redis has expired it by then
	w        *window
}

func newEmbCache(opts Options, m *metrics, log *slog.Logger) *embCache {
	c := &embCache{
		rdb: redis.NewClient(&redis.Options{
			Addr: opts.Redis,
			// A Redis that goes away must cost a request little: no
			// retries, short timeouts, and the request is served as a
			// miss.
			MaxRetries:  -1,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
			PoolTimeout: time.Second,
			// RESP2 and no maintenance notifications: a plain Redis 7 on
			// loopback, and no goroutines beyond the gateway's own.
			Protocol:                 2,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
			DisableIdentity:          true,
		}),
		addr: opts.Redis, ns: opts.Namespace, ttl: opts.CacheTTL, window: opts.Window, sweep: opts.Sweep,
		leaky: opts.Leaks.Cache, p: opts.Probe, log: log, m: m,
		entries: map[string]*entry{}, up: true,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	m.redisUp.Set(1)
	go c.run()
	return c
}

// key is the entry's key for a tenant's prompt.
func (c *embCache) key(tenant, hash string) string {
	return c.ns + ":{" + tenant + "}:emb:" + hash
}

// pattern matches every entry of every tenant.
func (c *embCache) pattern() string { return c.ns + ":*:emb:*" }

// get returns the prompt's embedding, and cacheHit, cacheMiss or
// cacheError (Redis did not answer: the caller computes it, as on a
// miss).
func (c *embCache) get(ctx context.Context, tenant, hash string, dims int) ([]float32, string) {
	b, err := c.rdb.Get(ctx, c.key(tenant, hash)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		c.answered()
		return nil, cacheMiss
	case err != nil:
		c.failed(err)
		return nil, cacheError
	}
	c.answered()
	if len(b) != 4*dims {
		return nil, cacheMiss // written with another dimension: recomputed and overwritten
	}
	v := make([]float32, dims)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, cacheHit
}

// put writes the embedding with the TTL (none when leaky) and records it.
func (c *embCache) put(ctx context.Context, tenant, hash string, v []float32) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	key := c.key(tenant, hash)
	ttl := c.ttl
	if c.leaky {
		ttl = 0 // the leak: no expiry
	}
	if err := c.rdb.Set(ctx, key, b, ttl).Err(); err != nil {
		c.failed(err)
		return
	}
	c.answered()
	c.record(key, uint64(len(b)), time.Now())
}

// record notes that Redis holds key (bytes of value) since now, in the
// current TTL window; an entry written again replaces the old one.
func (c *embCache) record(key string, bytes uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[key]; old != nil {
		old.h.Free() // its value was replaced
	}
	w := c.windowLocked(now)
	c.entries[key] = &entry{h: w.s.Alloc(event.CategoryOther, labelEntry, bytes, event.ScopeBatch), deadline: now.Add(c.ttl), w: w}
	c.m.cacheEntries.Set(float64(len(c.entries)))
}

// windowLocked returns the TTL window open for writes at now, opening a
// new one when the current one has ended. c.mu held.
func (c *embCache) windowLocked(now time.Time) *window {
	if c.cur == nil || !now.Before(c.cur.end) {
		start := now.Truncate(c.window)
		c.cur = &window{s: c.p.Begin(event.ScopeBatch, labelWindow), start: start, end: start.Add(c.window)}
		c.windows = append(c.windows, c.cur)
	}
	return c.cur
}

// failed notes a command Redis did not answer; the first after an answer
// is said once, in the log and on the timeline.
func (c *embCache) failed(err error) {
	c.mu.Lock()
	was := c.up
	c.up = false
	c.mu.Unlock()
	if was {
		c.m.redisUp.Set(0)
		c.log.Warn("redis unreachable: embedding cache off, requests served as cache misses until it answers", "redis", c.addr, "err", err)
		c.p.Mark("redis unreachable: embedding cache off (requests served as misses)")
	}
}

// answered notes a command Redis answered; the first after a failure is
// said once.
func (c *embCache) answered() {
	c.mu.Lock()
	was := c.up
	c.up = true
	c.mu.Unlock()
	if !was {
		c.m.redisUp.Set(1)
		c.log.Info("redis answers again: embedding cache on", "redis", c.addr)
		c.p.Mark("redis answers again: embedding cache on")
	}
}

func (c *embCache) run() {
	defer close(c.done)
	t := time.NewTicker(c.sweep)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.sweepOnce(context.Background())
		}
	}
}

// sweepOnce evicts (unless leaky), asks Redis about the entries past
// their TTL, and ends the TTL windows that are over.
func (c *embCache) sweepOnce(ctx context.Context) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.sweep+5*time.Second)
	defer cancel()
	var err error
	if !c.leaky {
		err = c.evict(ctx)
	}
	if err == nil {
		err = c.expire(ctx, start)
	}
	if err != nil {
		c.failed(err)
	} else {
		c.answered()
		c.mu.Lock()
		c.checked = start
		c.mu.Unlock()
	}
	c.endWindows()
}

// evict is the namespaced eviction: every key of the namespace without a
// TTL is unlinked. SCAN walks the keyspace in steps, so Redis is never
// blocked on a large one, and UNLINK frees the values in the background.
func (c *embCache) evict(ctx context.Context) error {
	iter := c.rdb.Scan(ctx, 0, c.pattern(), 1000).Iterator()
	var keys []string
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		pipe := c.rdb.Pipeline()
		ttls := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			ttls[i] = pipe.TTL(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		var stale []string
		for i, k := range keys {
			if ttls[i].Val() == -1 { // no expiry (-2: gone already)
				stale = append(stale, k)
			}
		}
		keys = keys[:0]
		if len(stale) == 0 {
			return nil
		}
		if err := c.rdb.Unlink(ctx, stale...).Err(); err != nil {
			return err
		}
		c.m.evicted.Add(float64(len(stale)))
		c.forget(stale)
		return nil
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// forget frees the probe objects of keys that are no longer in Redis.
func (c *embCache) forget(keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if e := c.entries[k]; e != nil {
			e.h.Free()
			delete(c.entries, k)
		}
	}
	c.m.cacheEntries.Set(float64(len(c.entries)))
}

// expire asks Redis about every entry whose TTL has passed by now: one
// that is gone is freed; one still there (written without a TTL) is
// unlinked and freed, unless the cache is the leaky one.
func (c *embCache) expire(ctx context.Context, now time.Time) error {
	c.mu.Lock()
	var due []string
	for k, e := range c.entries {
		if !now.Before(e.deadline) {
			due = append(due, k)
		}
	}
	c.mu.Unlock()
	for len(due) > 0 {
		batch := due[:min(len(due), 1000)]
		due = due[len(batch):]
		pipe := c.rdb.Pipeline()
		exists := make([]*redis.IntCmd, len(batch))
		for i, k := range batch {
			exists[i] = pipe.Exists(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		var gone, stale []string
		for i, k := range batch {
			if exists[i].Val() == 0 {
				gone = append(gone, k)
			} else if !c.leaky {
				stale = append(stale, k)
			}
		}
		if len(stale) > 0 {
			if err := c.rdb.Unlink(ctx, stale...).Err(); err != nil {
				return err
			}
			c.m.evicted.Add(float64(len(stale)))
			gone = append(gone, stale...)
		}
		c.forget(gone)
	}
	return nil
}

// endWindows ends the TTL windows whose entries have all passed their
// TTL by the time the last sweep that reached Redis began: what of them
// is still alive lingers from now.
func (c *embCache) endWindows() {
	c.mu.Lock()
	defer c.mu.Unlock()
	open := c.windows[:0]
	for _, w := range c.windows {
		if !c.checked.IsZero() && !c.checked.Before(w.end.Add(c.ttl)) {
			if w == c.cur {
				c.cur = nil
			}
			w.s.End()
			continue
		}
		open = append(open, w)
	}
	clear(c.windows[len(open):])
	c.windows = open
}

// close stops the sweep and closes the client. The TTL windows still
// open are left open: what they hold is not judged.
func (c *embCache) close() error {
	close(c.stop)
	<-c.done
	if err := c.rdb.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}
