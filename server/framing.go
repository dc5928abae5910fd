package server

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"linger/notebooks/msg"
)

// The two websocket framings of a Jupyter message.
//
// v1 (subprotocol v1.kernel.websocket.jupyter.org, jupyter_server's
// serialize_msg_to_ws_v1): every message is one binary frame,
//
//	n            uint64 little-endian: the number of offsets
//	offsets[n]   uint64 little-endian, from the start of the frame
//	channel      bytes offsets[0]..offsets[1] (UTF-8)
//	header, parent_header, metadata, content: JSON, each offsets[i]..offsets[i+1]
//	buffers      the remaining parts, raw
//
// where offsets[n-1] is the end of the frame.
//
// legacy (no subprotocol): a message without buffers is a text frame
// holding the message as JSON with a "channel" key (and, from the server,
// msg_id and msg_type beside the header, as jupyter_client's Session
// writes a message; a client's message without "channel" is a shell
// message, see wsConn.decode); one with buffers is a
// binary frame (jupyter_server's serialize_binary_message),
//
//	nbufs        uint32 big-endian: parts, the JSON message plus buffers
//	offsets[nbufs] uint32 big-endian, where each part starts
//	the JSON message, then the buffers, each running to the next offset
//	(the last to the end of the frame).

// SubprotocolV1 is the websocket subprotocol of the v1 framing.
const SubprotocolV1 = "v1.kernel.websocket.jupyter.org"

// errFrame is wrapped by the decoders' errors.
var errFrame = errors.New("malformed websocket message")

// maxParts bounds the offset table a decoder will read, so a frame
// cannot make it allocate more than the frame itself justifies.
const maxParts = 1 << 16

// encodeV1 frames m for the v1 protocol.
func encodeV1(m *msg.Message) ([]byte, error) {
	var parts struct {
		Header       json.RawMessage `json:"header"`
		ParentHeader json.RawMessage `json:"parent_header"`
		Metadata     json.RawMessage `json:"metadata"`
		Content      json.RawMessage `json:"content"`
	}
	// MarshalJSON is the one place that decides how each part is written
	// (parent_header as {} when empty); take the parts back out of it.
	c := *m
	c.Buffers = nil
	w, err := c.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(w, &parts); err != nil {
		return nil, err
	}
	list := [][]byte{[]byte(m.Channel), parts.Header, parts.ParentHeader, parts.Metadata, parts.Content}
	list = append(list, m.Buffers...)
	n := len(list) + 1
	size := 8 * (1 + n)
	for _, p := range list {
		size += len(p)
	}
	out := make([]byte, 8*(1+n), size)
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := uint64(8 * (1 + n))
	binary.LittleEndian.PutUint64(out[8:], off)
	for i, p := range list {
		off += uint64(len(p))
		binary.LittleEndian.PutUint64(out[8*(i+2):], off)
	}
	for _, p := range list {
		out = append(out, p...)
	}
	return out, nil
}

// decodeV1 reads a v1 frame. Buffers alias b.
func decodeV1(b []byte) (*msg.Message, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: v1 frame of %d bytes", errFrame, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n < 6 || n > maxParts || n > uint64(len(b)/8-1) {
		return nil, fmt.Errorf("%w: v1 frame with %d offsets", errFrame, n)
	}
	offs := make([]uint64, n)
	prev := 8 * (n + 1)
	for i := range offs {
		o := binary.LittleEndian.Uint64(b[8*(i+1):])
		if o < prev || o > uint64(len(b)) {
			return nil, fmt.Errorf("%w: v1 offset %d is %d", errFrame, i, o)
		}
		offs[i], prev = o, o
	}
	part := func(i int) []byte { return b[offs[i]:offs[i+1]] }
	ch := part(0)
	if !utf8.Valid(ch) {
		return nil, fmt.Errorf("%w: channel is not UTF-8", errFrame)
	}
	m := &msg.Message{Channel: string(ch)}
	if err := json.Unmarshal(part(1), &m.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", errFrame, err)
	}
	if p := part(2); len(p) > 0 && string(p) != "null" {
		if err := json.Unmarshal(p, &m.ParentHeader); err != nil {
			return nil, fmt.Errorf("%w: parent_header: %v", errFrame, err)
		}
	}
	for _, f := range []struct {
		name string
		dst  *json.RawMessage
		i    int
	}{{"metadata", &m.Metadata, 3}, {"content", &m.Content, 4}} {
		p := part(f.i)
		if len(p) == 0 || string(p) == "null" {
			continue
		}
		if !json.Valid(p) {
			return nil, fmt.Errorf("%w: %s is not JSON", errFrame, f.name)
		}
		*f.dst = json.RawMessage(p)
	}
	for i := 5; i < int(n)-1; i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return m, nil
}

// encodeLegacy frames m for the legacy protocol: the JSON text and, when
// m has buffers, a binary frame instead. binary says which it is.
func encodeLegacy(m *msg.Message) (frame []byte, binaryFrame bool, err error) {
	c := *m
	c.Buffers = nil
	j, err := c.MarshalJSON()
	if err != nil {
		return nil, false, err
	}
	if len(m.Buffers) == 0 {
		return j, false, nil
	}
	parts := append([][]byte{j}, m.Buffers...)
	n := len(parts)
	head := 4 * (n + 1)
	size := head
	for _, p := range parts {
		size += len(p)
	}
	out := make([]byte, head, size)
	binary.BigEndian.PutUint32(out, uint32(n))
	off := uint32(head)
	for i, p := range parts {
		binary.BigEndian.PutUint32(out[4*(i+1):], off)
		off += uint32(len(p))
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, true, nil
}

// decodeLegacy reads a legacy frame: JSON text, or the binary form when
// binaryFrame. Buffers alias b.
func decodeLegacy(b []byte, binaryFrame bool) (*msg.Message, error) {
	if !binaryFrame {
		return decodeJSON(b)
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: binary frame of %d bytes", errFrame, len(b))
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || n > maxParts || uint64(n) > uint64(len(b)/4-1) {
		return nil, fmt.Errorf("%w: binary frame with %d parts", errFrame, n)
	}
	offs := make([]uint32, n+1)
	prev := 4 * (n + 1)
	for i := uint32(0); i < n; i++ {
		o := binary.BigEndian.Uint32(b[4*(i+1):])
		if o < prev || uint64(o) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: binary offset %d is %d", errFrame, i, o)
		}
		offs[i], prev = o, o
	}
	offs[n] = uint32(len(b))
	if uint64(len(b)) > 1<<32-1 {
		return nil, fmt.Errorf("%w: binary frame over 4 GiB", errFrame)
	}
	m, err := decodeJSON(b[offs[0]:offs[1]])
	if err != nil {
		return nil, err
	}
	m.Buffers = nil
	for i := uint32(1); i < n; i++ {
		m.Buffers = append(m.Buffers, b[offs[i]:offs[i+1]])
	}
	return m, nil
}

func decodeJSON(b []byte) (*msg.Message, error) {
	m := new(msg.Message)
	if err := m.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("%w: %v", errFrame, err)
	}
	return m, nil
}
