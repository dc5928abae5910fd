package kernel

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"testing"
	"time"

	"linger/kernel/wire"
	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
	"linger/timeline/event/eventtest"
)

// client drives an in-process kernel over pipes.
type client struct {
	t       testing.TB
	w       *io.PipeWriter
	mu      sync.Mutex
	msgs    chan *msg.Message
	ctrl    chan wire.Control
	done    chan error
	session string
	log     eventtest.Sink // the kernel's events, decoded from its FrameEvents
	held    []wire.Control // the holders the kernel recorded (OpHolders), under mu
}

// heldBy returns the holder paths the kernel recorded, by allocation
// seq, the latest record winning, and the records' reasons in order.
func (c *client) heldBy() (map[uint64]string, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := map[uint64]string{}
	var reasons []string
	for _, ctl := range c.held {
		reasons = append(reasons, ctl.Reason)
		for _, h := range ctl.Holders {
			paths[h.AllocSeq] = h.Path
		}
	}
	return paths, reasons
}

func startKernel(t testing.TB) *client {
	t.Helper()
	return startKernelOpts(t, Options{})
}

// startKernelOpts is startKernel with these Options.
func startKernelOpts(t testing.TB, opts Options) *client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &client{t: t, w: inW, msgs: make(chan *msg.Message, 4096), ctrl: make(chan wire.Control, 16), done: make(chan error, 1), session: msg.NewID()}
	go func() { c.done <- Serve(context.Background(), inR, outW, opts); outW.Close() }()
	t.Cleanup(func() {
		if err := c.log.Err(); err != nil {
			t.Errorf("the kernel's event stream broke a Sink rule: %v", err)
		}
	})
	go func() {
		for {
			typ, p, err := wire.ReadFrame(outR)
			if err != nil {
				close(c.msgs)
				return
			}
			switch typ {
			case wire.FrameMessage:
				m, err := wire.DecodeMessage(p)
				if err != nil {
					t.Errorf("kernel sent a bad message: %v", err)
					continue
				}
				c.msgs <- m
			case wire.FrameEvents:
				if err := wire.DecodeEvents(p, &c.log); err != nil {
					t.Errorf("kernel sent bad events: %v", err)
				}
			case wire.FrameControl:
				var ctl wire.Control
				_ = json.Unmarshal(p, &ctl)
				if ctl.Op == wire.OpHolders {
					c.mu.Lock()
					c.held = append(c.held, ctl)
					c.mu.Unlock()
					continue
				}
				c.ctrl <- ctl
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			t.Error("kernel did not stop")
		}
	})
	return c
}

func (c *client) request(channel, typ string, content any, meta map[string]any) *msg.Message {
	m := msg.New(channel, typ, c.session, content)
	if meta != nil {
		m.Metadata, _ = json.Marshal(meta)
	}
	b, _ := json.Marshal(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := wire.WriteFrame(c.w, wire.FrameMessage, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	return m
}

// collect returns the messages answering req up to its idle status (and
// its reply).
func (c *client) collect(req *msg.Message, timeout time.Duration) []*msg.Message {
	c.t.Helper()
	var out []*msg.Message
	gotReply, gotIdle := false, false
	deadline := time.After(timeout)
	for !(gotReply && gotIdle) {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				c.t.Fatalf("kernel closed; got %d messages", len(out))
			}
			if m.ParentHeader.MsgID != req.Header.MsgID {
				continue
			}
			out = append(out, m)
			if m.Channel != msg.IOPub {
				gotReply = true
			}
			if m.Header.MsgType == "status" && string(msgtest.Status(m)) == "idle" {
				gotIdle = true
			}
		case <-deadline:
			c.t.Fatalf("timeout waiting for %s; got %s", req.Header.MsgType, msgtest.Types(out))
		}
	}
	return out
}

func (c *client) exec(code string) []*msg.Message {
	c.t.Helper()
	return c.collect(c.request(msg.Shell, "execute_request", map[string]any{"code": code, "silent": false}, nil), 20*time.Second)
}

// stop shuts the kernel down as the server does (its input closed) and
// waits until it has ended and every frame it sent is read, so that c.log
// holds the whole trace, the teardown included.
func (c *client) stop() {
	c.t.Helper()
	c.w.Close()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup's wait
		if err != nil {
			c.t.Fatalf("kernel ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		c.t.Fatal("kernel did not stop")
	}
	for range c.msgs { // closed when the kernel's output ends
	}
}
