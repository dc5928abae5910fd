package soak

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"linger/notebooks/msg"
)

// kernelClient is a Jupyter client of one kernel over its websocket, in
// the legacy JSON framing (one text frame per message).
type kernelClient struct {
	ws      *websocket.Conn
	session string
}

func (s *server) dialKernel(kid string) (*kernelClient, error) {
	session := msg.NewID()
	u := "ws" + strings.TrimPrefix(s.base, "http") + "/api/kernels/" + kid + "/channels?session_id=" + session
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(u, http.Header{"Authorization": {"token " + s.token}})
	if err != nil {
		return nil, fmt.Errorf("dial kernel %s: %w (%v)", kid, err, resp)
	}
	return &kernelClient{ws: ws, session: session}, nil
}

func (c *kernelClient) Close() error { return c.ws.Close() }

// send sends an execute_request for code and returns it.
func (c *kernelClient) send(code string) (*msg.Message, error) {
	m := msg.New(msg.Shell, "execute_request", c.session, map[string]any{"code": code, "silent": false})
	b, err := m.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return m, c.ws.WriteMessage(websocket.TextMessage, b)
}

// read returns the next message, waiting at most d.
func (c *kernelClient) read(d time.Duration) (*msg.Message, error) {
	c.ws.SetReadDeadline(time.Now().Add(d))
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	m := new(msg.Message)
	if err := m.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("kernel message %.100s: %w", b, err)
	}
	return m, nil
}

// until reads messages until one of type typ answering req arrives.
func (c *kernelClient) until(req *msg.Message, typ string, d time.Duration) (*msg.Message, error) {
	deadline := time.Now().Add(d)
	for {
		m, err := c.read(time.Until(deadline))
		if err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", typ, err)
		}
		if m.Header.MsgType == typ && m.ParentHeader.MsgID == req.Header.MsgID {
			return m, nil
		}
	}
}

// execute runs code and fails unless the cell ends "ok".
func (c *kernelClient) execute(code string, d time.Duration) error {
	req, err := c.send(code)
	if err != nil {
		return err
	}
	r, err := c.until(req, "execute_reply", d)
	if err != nil {
		return err
	}
	var reply struct {
		Status string `json:"status"`
		EName  string `json:"ename"`
		EValue string `json:"evalue"`
	}
	if err := json.Unmarshal(r.Content, &reply); err != nil {
		return err
	}
	if reply.Status != "ok" {
		return fmt.Errorf("cell %q: %s: %s %s", code, reply.Status, reply.EName, reply.EValue)
	}
	return nil
}

// waitDead reads until the kernel's status is dead.
func (c *kernelClient) waitDead(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		m, err := c.read(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("waiting for status dead: %w", err)
		}
		if m.Header.MsgType == "status" && strings.Contains(string(m.Content), `"dead"`) {
			return nil
		}
	}
}
