package kernel

import (
	"encoding/json"

	"linger/notebooks/msg"
)

func statusOf(m *msg.Message) string {
	var s struct {
		State string `json:"execution_state"`
	}
	_ = json.Unmarshal(m.Content, &s)
	return s.State
}

func types(ms []*msg.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Header.MsgType)
	}
	return out
}

func find(ms []*msg.Message, typ string) map[string]any {
	for _, m := range ms {
		if m.Header.MsgType == typ {
			var v map[string]any
			_ = json.Unmarshal(m.Content, &v)
			return v
		}
	}
	return nil
}
