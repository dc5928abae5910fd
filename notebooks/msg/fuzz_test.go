package msg

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

// FuzzUnmarshal reads a message as the legacy websocket framing and the
// kernel pipe do: what decodes and validates writes back (parent_header,
// metadata and content as objects) to a message that reads back the same
// and still validates; what does not validate is refused with ErrInvalid.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(`{"channel":"shell","header":{"msg_id":"1","msg_type":"execute_request","session":"s","version":"5.3"},"parent_header":{},"metadata":{},"content":{"code":"1+1","silent":false}}`))
	f.Add([]byte(`{"channel":"iopub","header":{"msg_id":"2","msg_type":"status"},"parent_header":null,"content":{"execution_state":"idle"},"buffers":["AAE="]}`))
	f.Add([]byte(`{"channel":"shell","header":{"msg_id":"3","msg_type":"x"},"content":[1]}`))
	f.Add([]byte(`{"channel":"shell","msg_id":"4","header":{"msg_id":"4","msg_type":"x","date":1764685221126},"parent_header":{"date":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		if err := m.UnmarshalJSON(b); err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate: %v is not ErrInvalid", err)
			}
			return
		}
		out, err := m.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON: %v", err)
		}
		var again Message
		if err := again.UnmarshalJSON(out); err != nil {
			t.Fatalf("reading back %s: %v", out, err)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("%s no longer validates: %v", out, err)
		}
		if again.Channel != m.Channel || again.Header != m.Header || again.ParentHeader != m.ParentHeader ||
			!sameJSON(again.Metadata, m.Metadata) || !sameJSON(again.Content, m.Content) || !sameBuffers(again.Buffers, m.Buffers) {
			t.Fatalf("%s reads back as %+v, want %+v", out, again, m)
		}
	})
}

// sameJSON compares two objects, an empty one and none alike.
func sameJSON(a, b json.RawMessage) bool {
	norm := func(r json.RawMessage) []byte {
		if len(r) == 0 {
			return []byte("{}")
		}
		var v any
		_ = json.Unmarshal(r, &v)
		out, _ := json.Marshal(v)
		return out
	}
	return bytes.Equal(norm(a), norm(b))
}

// sameBuffers compares buffer lists, an empty one and none alike.
func sameBuffers(a, b [][]byte) bool {
	return len(a) == len(b) && (len(a) == 0 || slices.EqualFunc(a, b, bytes.Equal))
}
