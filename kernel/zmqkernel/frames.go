package zmqkernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"linger/notebooks/msg"
)

// delimiter separates the routing identities from the signed message.
var delimiter = []byte("<IDS|MSG>")

// signer signs and checks messages with the connection's key; an empty
// key signs with "" and checks nothing, as jupyter_client does.
type signer struct{ key []byte }

func (s signer) sign(parts ...[]byte) []byte {
	if len(s.key) == 0 {
		return nil
	}
	h := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		h.Write(p)
	}
	return []byte(hex.EncodeToString(h.Sum(nil)))
}

var errSignature = errors.New("bad signature")

// decode splits a received multipart message into its identities and
// the message, checking its signature.
func (s signer) decode(frames [][]byte, channel string) (ids [][]byte, m *msg.Message, err error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if i == len(frames) {
		return nil, nil, errors.New("no <IDS|MSG> delimiter")
	}
	ids = frames[:i]
	rest := frames[i+1:]
	if len(rest) < 5 {
		return ids, nil, fmt.Errorf("%d frames after the delimiter, want at least 5", len(rest))
	}
	if len(s.key) > 0 && !hmac.Equal(rest[0], s.sign(rest[1], rest[2], rest[3], rest[4])) {
		return ids, nil, errSignature
	}
	w := struct {
		Header       json.RawMessage `json:"header"`
		ParentHeader json.RawMessage `json:"parent_header"`
		Metadata     json.RawMessage `json:"metadata"`
		Content      json.RawMessage `json:"content"`
		Buffers      [][]byte        `json:"buffers,omitempty"`
		Channel      string          `json:"channel"`
	}{rest[1], rest[2], rest[3], rest[4], rest[5:], channel}
	for _, f := range []*json.RawMessage{&w.Header, &w.ParentHeader, &w.Metadata, &w.Content} {
		if !json.Valid(*f) {
			return ids, nil, errors.New("a part is not JSON")
		}
	}
	b, _ := json.Marshal(w)
	m = new(msg.Message)
	if err := json.Unmarshal(b, m); err != nil {
		return ids, nil, err
	}
	return ids, m, nil
}

// encode is the multipart form of m after the identities ids, signed.
func (s signer) encode(ids [][]byte, m *msg.Message) ([][]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var w struct {
		Header       json.RawMessage `json:"header"`
		ParentHeader json.RawMessage `json:"parent_header"`
		Metadata     json.RawMessage `json:"metadata"`
		Content      json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	frames := append([][]byte{}, ids...)
	frames = append(frames, delimiter, s.sign(w.Header, w.ParentHeader, w.Metadata, w.Content), w.Header, w.ParentHeader, w.Metadata, w.Content)
	frames = append(frames, m.Buffers...)
	return frames, nil
}
