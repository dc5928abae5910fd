// Package msgtest reads the Jupyter messages a test collected from a
// kernel: the first of a type, the types in order, a status's state. It is
// for tests only (deps_test.go's testOnly).
package msgtest

import (
	"encoding/json"

	"linger/notebooks/msg"
)

// Find returns the content of the first message of type typ in ms,
// decoded as a map, or nil when there is none.
func Find(ms []*msg.Message, typ string) map[string]any {
	for _, m := range ms {
		if m.Header.MsgType == typ {
			var v map[string]any
			_ = json.Unmarshal(m.Content, &v)
			return v
		}
	}
	return nil
}

// Types returns the types of ms, in order, for a failure's message.
func Types(ms []*msg.Message) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Header.MsgType)
	}
	return out
}

// Status returns the execution_state of a status message ("busy",
// "idle"), or "" for any other message.
func Status(m *msg.Message) string {
	var s struct {
		State string `json:"execution_state"`
	}
	_ = json.Unmarshal(m.Content, &s)
	return s.State
}
