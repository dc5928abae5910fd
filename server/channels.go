package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"linger/notebooks/msg"
	"linger/server/httperr"
)

const (
	writeWait  = 10 * time.Second
	pongWait   = 60 * time.Second
	pingPeriod = pongWait * 9 / 10
	// outBuffer is the server's own messages to one client (error replies)
	// waiting for the writer; the reader blocks when it is full, which
	// only slows that client down.
	outBuffer = 16
	// doneGrace is how long a closed subscription waits for the kernel's
	// Done to tell a shutdown from a slow client.
	doneGrace = 250 * time.Millisecond
)

// errNotWebsocket answers a plain GET of the channels route.
var errNotWebsocket = errors.New("the channels route needs a websocket upgrade")

// wsConn is one client's websocket to one kernel.
//
// Concurrency, as in gorilla's chat example: exactly one goroutine reads
// (readPump, on the handler's goroutine) and exactly one writes
// (writePump). The reader hands the writer what it must say (error
// replies) through out; kernel messages come to the writer from the
// kernel subscription. WriteControl (the close frame) is the only write
// gorilla allows from other goroutines and is not used.
type wsConn struct {
	s       *Server
	k       kernelHandle
	ws      *websocket.Conn
	v1      bool
	out     chan *msg.Message
	quit    chan struct{} // closed by the reader when it stops
	stopped chan struct{} // closed by the writer when it stops

	mu       sync.Mutex
	sessions map[string]bool // client sessions whose replies this connection gets
}

func (s *Server) handleChannels(w http.ResponseWriter, r *http.Request) {
	k, err := s.kernel(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if !isWebsocket(r) {
		s.writeError(w, r, httperr.Wrap(httperr.BadRequest, errNotWebsocket))
		return
	}
	if !originOK(r) {
		s.writeError(w, r, errOrigin)
		return
	}
	up := websocket.Upgrader{
		Subprotocols: []string{SubprotocolV1},
		// Checked above, with a JSON error rather than gorilla's text.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		// Upgrade has answered the client.
		s.log.Info("websocket upgrade", "err", err)
		return
	}
	c := &wsConn{
		s: s, k: k, ws: ws, v1: ws.Subprotocol() == SubprotocolV1,
		out: make(chan *msg.Message, outBuffer), quit: make(chan struct{}), stopped: make(chan struct{}),
		sessions: map[string]bool{},
	}
	if sid := r.URL.Query().Get("session_id"); sid != "" {
		c.sessions[sid] = true
	}
	sub, cancel := k.Subscribe()
	s.addConn(k.ID(), 1)
	s.metrics.wsOpen.Inc()
	s.metrics.wsTotal.Inc()
	defer func() {
		cancel()
		s.addConn(k.ID(), -1)
		s.metrics.wsOpen.Dec()
	}()
	go c.writePump(sub)
	c.readPump()
	close(c.quit)
	<-c.stopped
}

// wants says whether a kernel message goes to this client: iopub goes to
// every client, a reply to the client whose session asked.
func (c *wsConn) wants(m *msg.Message) bool {
	if m.Channel == msg.IOPub || m.ParentHeader.Session == "" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[m.ParentHeader.Session]
}

func (c *wsConn) readPump() {
	max := c.s.opts.MaxMessageBytes
	// A hard cap well past the soft one: gorilla closes the connection
	// there; below it, an oversized message is refused and the
	// connection stays.
	c.ws.SetReadLimit(4 * max)
	_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(pongWait)) })
	for {
		typ, rd, err := c.ws.NextReader()
		if err != nil {
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
		data, err := io.ReadAll(io.LimitReader(rd, max+1))
		if err != nil {
			return
		}
		if int64(len(data)) > max {
			if _, err := io.Copy(io.Discard, rd); err != nil {
				return
			}
			c.s.metrics.wsRefused.WithLabelValues("too_large").Inc()
			if !c.say(errorReply(nil, fmt.Errorf("message over %d bytes refused", max))) {
				return
			}
			continue
		}
		m, err := c.decode(typ, data)
		if err == nil {
			err = validate(m)
		}
		if err != nil {
			c.s.metrics.wsRefused.WithLabelValues("malformed").Inc()
			if !c.say(errorReply(partial(m, data, typ), err)) {
				return
			}
			continue
		}
		if m.Header.Session != "" {
			c.mu.Lock()
			c.sessions[m.Header.Session] = true
			c.mu.Unlock()
		}
		if err := c.k.Send(m); err != nil {
			c.s.metrics.wsRefused.WithLabelValues("send").Inc()
			if !c.say(errorReply(m, fmt.Errorf("kernel: %w", err))) {
				return
			}
			continue
		}
		c.s.metrics.relayed.WithLabelValues("to_kernel", m.Channel).Inc()
	}
}

// say queues a message of the server's own for this client; false when
// the writer is gone.
func (c *wsConn) say(m *msg.Message) bool {
	select {
	case c.out <- m:
		return true
	case <-c.stopped:
		return false
	}
}

// decode reads a client's message. On the legacy framing a message
// without a channel is a shell message, as Jupyter Server assumes; v1
// frames name theirs.
func (c *wsConn) decode(typ int, data []byte) (*msg.Message, error) {
	if c.v1 && typ == websocket.BinaryMessage {
		return decodeV1(data)
	}
	m, err := decodeLegacy(data, typ == websocket.BinaryMessage)
	if err == nil && !c.v1 && m.Channel == "" {
		m.Channel = msg.Shell
	}
	return m, err
}

// validate is msg.Validate plus the rule that clients do not publish.
func validate(m *msg.Message) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.Channel == msg.IOPub {
		return fmt.Errorf("%w: clients cannot send on iopub", msg.ErrInvalid)
	}
	return nil
}

// partial returns what can be read of a malformed message's channel and
// header, to address the error reply; m when decoding got that far.
func partial(m *msg.Message, data []byte, typ int) *msg.Message {
	if m != nil {
		return m
	}
	if typ != websocket.TextMessage {
		return nil
	}
	var p struct {
		Channel string     `json:"channel"`
		Header  msg.Header `json:"header"`
	}
	if json.Unmarshal(data, &p) != nil {
		return nil
	}
	return &msg.Message{Channel: p.Channel, Header: p.Header}
}

// errorReply answers a message the server could not pass on: a
// request gets its *_reply with status "error", so the client's future
// settles; anything else (or nothing readable) gets an iopub "error"
// message on this connection only.
func errorReply(to *msg.Message, err error) *msg.Message {
	content := map[string]any{
		"status": "error", "ename": "InvalidMessage", "evalue": err.Error(),
		"traceback": []string{"InvalidMessage: " + err.Error()},
	}
	if to != nil && strings.HasSuffix(to.Header.MsgType, "_request") {
		ch := to.Channel
		if ch != msg.Shell && ch != msg.Control && ch != msg.Stdin {
			ch = msg.Shell
		}
		return to.Reply(ch, msg.ReplyType(to.Header.MsgType), content)
	}
	e := msg.New(msg.IOPub, "error", "", content)
	if to != nil {
		e.ParentHeader = to.Header
		e.Header.Session = to.Header.Session
	}
	return e
}

func (c *wsConn) writePump(sub <-chan *msg.Message) {
	o := c.s.opts
	limit := rateLimit{msgRate: o.IOPubMsgRateLimit, dataRate: o.IOPubDataRateLimit, window: o.RateLimitWindow}
	ping := time.NewTicker(pingPeriod)
	defer func() {
		ping.Stop()
		_ = c.ws.Close()
		close(c.stopped)
	}()
	for {
		select {
		case m, ok := <-sub:
			if !ok {
				c.closeSub()
				return
			}
			if !c.wants(m) {
				continue
			}
			if ok, notice := limit.allow(m, time.Now()); !ok {
				c.s.metrics.relayed.WithLabelValues("rate_limited", m.Channel).Inc()
				if notice != nil {
					if err := c.write(notice); err != nil {
						return
					}
				}
				continue
			}
			if err := c.write(m); err != nil {
				return
			}
			c.s.metrics.relayed.WithLabelValues("to_client", m.Channel).Inc()
		case m := <-c.out:
			if err := c.write(m); err != nil {
				return
			}
		case <-ping.C:
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				return
			}
		case <-c.quit:
			return
		}
	}
}

// closeSub says goodbye when the kernel's subscription ends: the kernel
// was shut down, or this client fell too far behind and was cut off (the
// client reconnects and asks the kernel for its state again).
func (c *wsConn) closeSub() {
	code, text := websocket.CloseNormalClosure, "kernel shut down"
	// A shutdown closes the subscriptions just before Done, so give Done
	// a moment before calling the client slow.
	t := time.NewTimer(doneGrace)
	defer t.Stop()
	select {
	case <-c.k.Done():
	case <-t.C:
		code, text = websocket.CloseTryAgainLater, "client too slow: messages were dropped; reconnect"
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	_ = c.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(code, text))
}

func (c *wsConn) write(m *msg.Message) error {
	var (
		b   []byte
		typ = websocket.TextMessage
		err error
	)
	if c.v1 {
		b, err = encodeV1(m)
		typ = websocket.BinaryMessage
	} else {
		var bin bool
		b, bin, err = encodeLegacy(m)
		if bin {
			typ = websocket.BinaryMessage
		}
	}
	if err != nil {
		c.s.log.Error("encode kernel message", "type", m.Header.MsgType, "err", err)
		return nil
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	return c.ws.WriteMessage(typ, b)
}
