package msg_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"linger/notebooks/msg"
)

func TestRoundTripAndParentHeader(t *testing.T) {
	req := msg.New(msg.Shell, "execute_request", "sess-1", map[string]any{"code": "1+1"})
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"parent_header":{}`) || !strings.Contains(string(b), `"metadata":{}`) {
		t.Errorf("a message without parent must carry parent_header {} and metadata {}: %s", b)
	}
	var back msg.Message
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Header != req.Header || back.Channel != msg.Shell || !back.ParentHeader.IsZero() {
		t.Errorf("round trip changed the message: %+v", back)
	}
	rep := back.Reply("", "execute_reply", map[string]any{"status": "ok"})
	if rep.ParentHeader != req.Header || rep.Header.Session != "sess-1" || rep.Channel != msg.Shell || rep.Header.MsgID == req.Header.MsgID {
		t.Errorf("reply %+v does not answer %+v", rep.Header, req.Header)
	}
	var c struct{ Status string }
	if err := rep.DecodeContent(&c); err != nil || c.Status != "ok" {
		t.Errorf("content %q: %v", rep.Content, err)
	}
	if len(msg.NewID()) != 36 || msg.NewID() == msg.NewID() {
		t.Error("NewID is not a fresh UUID")
	}
}

func TestNullsAndValidate(t *testing.T) {
	var m msg.Message
	if err := json.Unmarshal([]byte(`{"channel":"shell","header":{"msg_id":"a","msg_type":"kernel_info_request"},"parent_header":null,"metadata":null,"content":null}`), &m); err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("valid message rejected: %v", err)
	}
	for _, c := range []struct {
		name, in string
	}{
		{"bad channel", `{"channel":"radio","header":{"msg_id":"a","msg_type":"x"}}`},
		{"no id", `{"channel":"shell","header":{"msg_type":"x"}}`},
		{"no type", `{"channel":"shell","header":{"msg_id":"a"}}`},
		{"content array", `{"channel":"shell","header":{"msg_id":"a","msg_type":"x"},"content":[1]}`},
		{"metadata string", `{"channel":"shell","header":{"msg_id":"a","msg_type":"x"},"metadata":"m"}`},
	} {
		var m msg.Message
		if err := json.Unmarshal([]byte(c.in), &m); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := m.Validate(); !errors.Is(err, msg.ErrInvalid) {
			t.Errorf("%s: Validate() = %v, want ErrInvalid", c.name, err)
		}
	}
	if err := json.Unmarshal([]byte(`{"header":{},"parent_header":"x"}`), &m); err == nil {
		t.Error("a string parent_header was accepted")
	}
}

// TestReplyType: a request is answered by its _reply; anything else
// (a client sending "execute" or a reply) gets error_reply.
func TestReplyType(t *testing.T) {
	for in, want := range map[string]string{
		"execute_request":    "execute_reply",
		"inspect_request":    "inspect_reply",
		"frobnicate_request": "frobnicate_reply",
		"execute":            "error_reply",
		"execute_reply":      "error_reply",
		"":                   "error_reply",
	} {
		if got := msg.ReplyType(in); got != want {
			t.Errorf("ReplyType(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHeaderDate: a client's header.date of any JSON type is accepted
// (Jupyter Server passes it on unread); a number keeps its text.
func TestHeaderDate(t *testing.T) {
	for _, c := range []struct{ date, want string }{
		{`"2026-12-02T14:20:21.126Z"`, "2026-12-02T14:20:21.126Z"},
		{`1764685221126`, "1764685221126"},
		{`1.7646852211e9`, "1.7646852211e9"},
		{`-1`, "-1"},
		{`null`, ""},
		{`{"x":1}`, ""},
		{`true`, ""},
	} {
		in := `{"channel":"shell","header":{"msg_id":"a","msg_type":"kernel_info_request","session":"s","date":` + c.date + `},"parent_header":{"msg_id":"p","date":` + c.date + `},"content":{}}`
		var m msg.Message
		if err := json.Unmarshal([]byte(in), &m); err != nil {
			t.Errorf("date %s: %v", c.date, err)
			continue
		}
		if err := m.Validate(); err != nil {
			t.Errorf("date %s: %v", c.date, err)
		}
		if m.Header.Date != c.want || m.ParentHeader.Date != c.want || m.Header.MsgID != "a" || m.Header.Session != "s" {
			t.Errorf("date %s: header %+v, parent %+v, want date %q", c.date, m.Header, m.ParentHeader, c.want)
		}
	}
}

// TestDateFormat: the dates Linger writes have 6 fractional digits, which
// jupyter_client's parser reads (it refuses 9).
func TestDateFormat(t *testing.T) {
	want := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	for range 20 { // a time whose nanoseconds end in zeros would hide RFC3339Nano
		if d := msg.New(msg.Shell, "x", "", nil).Header.Date; !want.MatchString(d) {
			t.Fatalf("header date %q, want 6 fractional digits", d)
		}
	}
	at := time.Date(2026, 12, 2, 15, 20, 21, 126000789, time.FixedZone("CET", 3600))
	if got := msg.FormatDate(at); got != "2026-12-02T14:20:21.126000Z" {
		t.Errorf("FormatDate = %q", got)
	}
}

// TestTopLevelIDs: the JSON form carries msg_id and msg_type beside the
// header, as Jupyter Server's legacy frames do.
func TestTopLevelIDs(t *testing.T) {
	m := msg.New(msg.IOPub, "status", "s", map[string]any{"execution_state": "idle"})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var top struct {
		MsgID   string `json:"msg_id"`
		MsgType string `json:"msg_type"`
	}
	if err := json.Unmarshal(b, &top); err != nil || top.MsgID != m.Header.MsgID || top.MsgType != "status" {
		t.Errorf("top level %+v (%v) of %s", top, err, b)
	}
}
