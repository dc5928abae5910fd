package msgtest

import (
	"encoding/json"
	"slices"
	"testing"

	"linger/notebooks/msg"
)

func message(t *testing.T, typ string, content any) *msg.Message {
	t.Helper()
	b, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	m := &msg.Message{Content: b}
	m.Header.MsgType = typ
	return m
}

func TestFind(t *testing.T) {
	ms := []*msg.Message{
		message(t, "status", map[string]any{"execution_state": "busy"}),
		message(t, "stream", map[string]any{"text": "a"}),
		message(t, "stream", map[string]any{"text": "b"}),
		message(t, "status", map[string]any{"execution_state": "idle"}),
	}
	if got := Find(ms, "stream"); got["text"] != "a" {
		t.Errorf("Find(stream) = %v, want the first", got)
	}
	if got := Find(ms, "execute_result"); got != nil {
		t.Errorf("Find(execute_result) = %v, want nil", got)
	}
	if got := Types(ms); !slices.Equal(got, []string{"status", "stream", "stream", "status"}) {
		t.Errorf("Types = %v", got)
	}
	if Status(ms[0]) != "busy" || Status(ms[3]) != "idle" || Status(ms[1]) != "" {
		t.Errorf("Status: %q %q %q", Status(ms[0]), Status(ms[3]), Status(ms[1]))
	}
}
