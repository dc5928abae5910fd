// Package msg is the Jupyter message (messaging spec 5.x) as Linger's
// server, kernel process and clients exchange it: header, parent header,
// metadata, content, binary buffers, and the channel it travels on.
//
// Only the message itself lives here; each transport (the kernel pipe, the
// two websocket framings) encodes it in its own package. So does the one
// date format every date Linger gives a client takes (FormatDate: UTC,
// microseconds), in message headers and REST answers alike.
package msg

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the messaging spec version Linger speaks.
const ProtocolVersion = "5.3"

// Channels of the Jupyter protocol.
const (
	Shell   = "shell"
	IOPub   = "iopub"
	Control = "control"
	Stdin   = "stdin"
)

// ErrInvalid is wrapped by Validate's errors.
var ErrInvalid = errors.New("invalid message")

// Header identifies a message. Fields a client sends that Linger does not
// use are dropped.
type Header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Username string `json:"username"`
	Session  string `json:"session"`
	// Date is the sender's timestamp as it wrote it: Linger writes
	// FormatDate's form; a client's string is kept as is, and a number
	// (some clients send a Unix time) as its JSON text, since Jupyter
	// Server passes either on unread. Any other JSON value reads as "".
	Date    string `json:"date"`
	Version string `json:"version"`
}

// UnmarshalJSON reads a header, taking a date of any JSON type (see
// Header.Date) rather than refusing the message over a field nothing
// reads.
func (h *Header) UnmarshalJSON(b []byte) error {
	type plain Header // without this method
	var w struct {
		plain
		Date json.RawMessage `json:"date"` // shadows plain.Date
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*h = Header(w.plain)
	h.Date = ""
	switch d := bytes.TrimSpace(w.Date); {
	case len(d) == 0:
	case d[0] == '"':
		if err := json.Unmarshal(d, &h.Date); err != nil {
			return fmt.Errorf("date: %w", err)
		}
	case d[0] == '-' || d[0] >= '0' && d[0] <= '9':
		h.Date = string(d)
	}
	return nil
}

// DateLayout is how Linger writes the dates clients read (message headers,
// the REST API's times): UTC with microseconds, as Jupyter writes them.
// jupyter_client's date parser reads at most 6 fractional digits, so Go's
// RFC3339Nano (up to 9) must not reach a client.
const DateLayout = "2006-01-02T15:04:05.000000Z"

// FormatDate formats t in DateLayout, converting it to UTC.
func FormatDate(t time.Time) string { return t.UTC().Format(DateLayout) }

// IsZero reports whether h is the empty header (no parent).
func (h Header) IsZero() bool { return h == Header{} }

// Message is one Jupyter message. Metadata and Content are JSON objects
// kept as raw bytes, so a message passes through the server unchanged.
type Message struct {
	Channel      string
	Header       Header
	ParentHeader Header // zero when the message has no parent
	Metadata     json.RawMessage
	Content      json.RawMessage
	Buffers      [][]byte
}

// wire is the JSON form of a message (the legacy websocket framing, and
// the kernel pipe). parent_header is always an object, {} when empty, as
// clients expect. msg_id and msg_type repeat the header's at the top
// level, as jupyter_client's Session writes a message and Jupyter Server
// sends it on the legacy framing (its gateway client reads them there);
// a reader takes them from the header.
type wire struct {
	Channel      string          `json:"channel,omitempty"`
	MsgID        string          `json:"msg_id"`
	MsgType      string          `json:"msg_type"`
	Header       Header          `json:"header"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Buffers      [][]byte        `json:"buffers,omitempty"`
}

var emptyObject = json.RawMessage("{}")

// MarshalJSON writes the message with parent_header, metadata and content
// always present as objects.
func (m *Message) MarshalJSON() ([]byte, error) {
	w := wire{Channel: m.Channel, MsgID: m.Header.MsgID, MsgType: m.Header.MsgType, Header: m.Header, ParentHeader: emptyObject, Metadata: m.Metadata, Content: m.Content, Buffers: m.Buffers}
	if !m.ParentHeader.IsZero() {
		p, err := json.Marshal(m.ParentHeader)
		if err != nil {
			return nil, err
		}
		w.ParentHeader = p
	}
	if len(w.Metadata) == 0 {
		w.Metadata = emptyObject
	}
	if len(w.Content) == 0 {
		w.Content = emptyObject
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a message; a null or missing parent_header, metadata
// or content becomes empty.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Message{Channel: w.Channel, Header: w.Header, Metadata: w.Metadata, Content: w.Content, Buffers: w.Buffers}
	if len(w.ParentHeader) > 0 && string(w.ParentHeader) != "null" {
		if err := json.Unmarshal(w.ParentHeader, &m.ParentHeader); err != nil {
			return fmt.Errorf("parent_header: %w", err)
		}
	}
	if string(m.Metadata) == "null" {
		m.Metadata = nil
	}
	if string(m.Content) == "null" {
		m.Content = nil
	}
	return nil
}

// Validate checks what every handler relies on: a known channel, a
// message id and type, and metadata and content that are JSON objects.
func (m *Message) Validate() error {
	switch m.Channel {
	case Shell, IOPub, Control, Stdin:
	default:
		return fmt.Errorf("%w: unknown channel %q", ErrInvalid, m.Channel)
	}
	if m.Header.MsgID == "" {
		return fmt.Errorf("%w: header.msg_id is empty", ErrInvalid)
	}
	if m.Header.MsgType == "" {
		return fmt.Errorf("%w: header.msg_type is empty", ErrInvalid)
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"metadata", m.Metadata}, {"content", m.Content}} {
		if len(f.raw) == 0 {
			continue
		}
		if !isObject(f.raw) {
			return fmt.Errorf("%w: %s is not a JSON object", ErrInvalid, f.name)
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return json.Valid(raw)
		}
		return false
	}
	return false
}

// NewID returns a random message or session id (a UUID v4 string).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// New returns a message of the given type on a channel, with content
// marshalled from v (nil: {}). It panics if v cannot be marshalled, which
// is a programmer error.
func New(channel, msgType, session string, v any) *Message {
	m := &Message{
		Channel: channel,
		Header: Header{
			MsgID: NewID(), MsgType: msgType, Username: "linger", Session: session,
			Date: FormatDate(time.Now()), Version: ProtocolVersion,
		},
	}
	m.SetContent(v)
	return m
}

// Reply returns a message answering m, with m's header as its parent and
// m's session; a kernel stamps its own session on what it sends. channel ""
// means m's channel.
func (m *Message) Reply(channel, msgType string, v any) *Message {
	if channel == "" {
		channel = m.Channel
	}
	r := New(channel, msgType, m.Header.Session, v)
	r.ParentHeader = m.Header
	return r
}

// SetContent marshals v into the content (nil: {}). It panics if v cannot
// be marshalled.
func (m *Message) SetContent(v any) {
	if v == nil {
		m.Content = emptyObject
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("msg: content of %s: %v", m.Header.MsgType, err))
	}
	m.Content = b
}

// DecodeContent unmarshals the content into v.
func (m *Message) DecodeContent(v any) error {
	c := m.Content
	if len(c) == 0 {
		c = emptyObject
	}
	if err := json.Unmarshal(c, v); err != nil {
		return fmt.Errorf("%w: content of %s: %v", ErrInvalid, m.Header.MsgType, err)
	}
	return nil
}

// ReplyType is the type of the reply to a message of type t: "x_request"
// is answered by "x_reply", anything else by "error_reply".
func ReplyType(t string) string {
	if base, ok := strings.CutSuffix(t, "_request"); ok {
		return base + "_reply"
	}
	return "error_reply"
}
