package kernel

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

// streamed is the stream text of ms, and how many stream messages carried it.
func streamed(t *testing.T, ms []*msg.Message) (string, int) {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			s := msgtest.Find([]*msg.Message{m}, "stream")
			b.WriteString(s["text"].(string))
			n++
		}
	}
	return b.String(), n
}

// A print over the pipe's frame limit arrives whole, in several stream
// messages; before, it vanished and the cell said "ok".
func TestPrintOverFrameLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("prints 70 MiB")
	}
	c := startKernel(t)
	// "é" is two bytes, "<" six once JSON-escaped: chunks must end at a
	// rune and fit the frame after escaping.
	const n = 24 << 20
	ms := c.collect(c.request(msg.Shell, "execute_request", map[string]any{"code": `print("é<" * 24 * 1024 * 1024)`}, nil), time.Minute)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	text, parts := streamed(t, ms)
	if want := strings.Repeat("é<", n) + "\n"; text != want {
		t.Fatalf("got %d bytes of stream text in %d messages, want %d", len(text), parts, len(want))
	}
	if parts < 2 {
		t.Errorf("%d stream messages, want the text in parts", parts)
	}
	if !utf8.ValidString(text) {
		t.Error("a part was cut inside a rune")
	}
}

// A result over the per-output cap is replaced by a notice that says so.
func TestResultOverCap(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		code string
		size string
	}{
		{"small cap", Options{MaxOutput: 1000}, `"x" * 5000`, "4.9 KiB"},
		{"over the frame", Options{}, `"x" * (70 * 1024 * 1024)`, "70.0 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.opts.MaxOutput == 0 {
				t.Skip("makes a 70 MiB result")
			}
			c := startKernelOpts(t, tc.opts)
			ms := c.exec(tc.code)
			if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
				t.Fatalf("reply %v", rep)
			}
			r := msgtest.Find(ms, "execute_result")
			if r == nil {
				t.Fatalf("no execute_result: %s", msgtest.Types(ms))
			}
			text := r["data"].(map[string]any)["text/plain"].(string)
			if !strings.HasPrefix(text, `"xxxx`) || !strings.Contains(text, "[output of "+tc.size+" truncated") || len(text) > 2000 {
				t.Errorf("result %.200q… (%d bytes)", text, len(text))
			}
		})
	}
}

// An error too large for the pipe is replaced by a notice, and the reply
// still comes, with status "error".
func TestErrorOverFrameLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("fails with 70 MiB")
	}
	c := startKernel(t)
	ms := c.exec(`fail("x" * (70 * 1024 * 1024))`)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "error" || rep["ename"] != "MessageTooLarge" {
		t.Fatalf("reply %.300v", rep)
	}
	if text, _ := streamed(t, ms); !strings.Contains(text, "[error of ") || !strings.Contains(text, "MiB not shown: over the kernel pipe's limit") {
		t.Errorf("stream %q", text)
	}
}

// A flood of prints is merged into a few messages, none lost, in order.
func TestPrintFlood(t *testing.T) {
	c := startKernel(t)
	start := time.Now()
	ms := c.exec("for i in range(1000000):\n    print(i)\n1")
	took := time.Since(start)
	text, parts := streamed(t, ms)
	var want strings.Builder
	for i := range 1000000 {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if text != want.String() {
		t.Fatalf("got %d bytes of stream text, want %d", len(text), want.Len())
	}
	if parts > 300 {
		t.Errorf("%d stream messages for 10^6 prints, want a few hundred at most", parts)
	}
	if got := strings.Join(msgtest.Types(ms[len(ms)-3:]), ","); got != "execute_result,execute_reply,status" {
		t.Errorf("the cell ends %s: all stream output goes before the result", got)
	}
	t.Logf("10^6 prints: %d stream messages, %v", parts, took)
}
