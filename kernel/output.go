package kernel

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"linger/kernel/wire"
	"linger/notebooks/msg"
)

// Output shaping. A cell's print()s are merged, as ipykernel's output
// buffering does, into one stream message per streamInterval (and at the
// cell's end, and before any other output of the cell), so that a loop of
// a million prints is a few dozen messages. One stream message carries at
// most streamChunk bytes of text, so that any print, however large,
// arrives in parts under the pipe's frame limit. A result or display over
// the kernel's per-output cap is replaced by a notice saying so.
const (
	streamInterval = 50 * time.Millisecond
	// streamChunk stays under wire.MaxFrame even when JSON escapes every
	// byte of the text to six ("\u0000").
	streamChunk = 8 << 20
	// DefaultMaxOutput is the per-output cap of Options.MaxOutput.
	DefaultMaxOutput = 16 << 20
	// MaxOutputEnv names the environment variable that sets the cap, in
	// bytes, when Options.MaxOutput is 0.
	MaxOutputEnv = "LINGER_MAX_OUTPUT"
)

// maxOutput resolves Options.MaxOutput.
func maxOutput(n int) int {
	if n > 0 {
		return n
	}
	if v, err := strconv.Atoi(os.Getenv(MaxOutputEnv)); err == nil && v > 0 {
		return v
	}
	return DefaultMaxOutput
}

// streamBuf is the stream text not sent yet: one parent, one stream name.
type streamBuf struct {
	mu     sync.Mutex
	parent *msg.Message
	name   string
	text   []byte
	since  time.Time // when the oldest text in buf arrived
	chunk  int       // streamChunk; smaller in tests
}

// stream queues text for the stream name ("stdout", "stderr") of the
// request parent; it goes out within streamInterval.
func (k *kernelProc) stream(parent *msg.Message, name, text string) {
	b := &k.streamBuf
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.text) > 0 && (b.parent != parent || b.name != name) {
		k.flushStreamLocked()
	}
	if len(b.text) == 0 {
		b.parent, b.name, b.since = parent, name, time.Now()
	}
	b.text = append(b.text, text...)
	for len(b.text) >= b.chunk {
		k.sendStream(cutRunes(b.text, b.chunk))
	}
}

// flushStream sends the buffered stream text; with due set, only when it
// has waited streamInterval.
func (k *kernelProc) flushStream(due bool) {
	b := &k.streamBuf
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.text) > 0 && (!due || time.Since(b.since) >= streamInterval) {
		k.flushStreamLocked()
	}
}

func (k *kernelProc) flushStreamLocked() {
	b := &k.streamBuf
	for len(b.text) > 0 {
		k.sendStream(cutRunes(b.text, b.chunk))
	}
	if cap(b.text) > b.chunk {
		b.text = nil // a huge print's buffer goes back to the heap
	}
	b.parent = nil
}

// sendStream sends the first n bytes of the buffer and drops them.
func (k *kernelProc) sendStream(n int) {
	b := &k.streamBuf
	k.send(k.iopub(b.parent, "stream", map[string]any{"name": b.name, "text": string(b.text[:n])}))
	b.text = b.text[:copy(b.text, b.text[n:])]
	b.since = time.Now()
}

// cutRunes is the longest prefix of p of at most n bytes that ends at a
// rune boundary (n itself when p holds no complete rune there).
func cutRunes(p []byte, n int) int {
	if len(p) <= n {
		return len(p)
	}
	for i := n; i > n-utf8.UTFMax && i > 0; i-- {
		if utf8.RuneStart(p[i]) {
			return i
		}
	}
	return n
}

// capOutput returns text, or when it is over the kernel's per-output cap
// the notice that replaces it, with its beginning.
func (k *kernelProc) capOutput(text string) string {
	if len(text) <= k.maxOutput {
		return text
	}
	const head = 1 << 10
	return fmt.Sprintf("%s…\n[output of %s truncated: over this kernel's limit of %s for one output (%s); print() streams it in full]",
		text[:cutRunes([]byte(text[:head+utf8.UTFMax]), head)], byteSize(len(text)), byteSize(k.maxOutput), MaxOutputEnv)
}

// byteSize writes n bytes for people.
func byteSize(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// tooLarge replaces a message whose encoding is over the frame limit (a
// huge error message, a cap set past what the pipe carries): an iopub
// output becomes a stderr notice to the same parent, a reply an error
// reply, so that the cell never ends "ok" with its output gone.
func (k *kernelProc) tooLarge(m *msg.Message, size int) *msg.Message {
	text := fmt.Sprintf("[%s of %s not shown: over the kernel pipe's limit of %s for one message]\n",
		m.Header.MsgType, byteSize(size), byteSize(wire.MaxFrame))
	var parent *msg.Message
	if !m.ParentHeader.IsZero() {
		parent = &msg.Message{Header: m.ParentHeader}
	}
	if m.Channel == msg.IOPub {
		return k.iopub(parent, "stream", map[string]any{"name": "stderr", "text": text})
	}
	if parent == nil {
		parent = &msg.Message{}
	}
	return parent.Reply(m.Channel, m.Header.MsgType, map[string]any{"status": "error", "ename": "MessageTooLarge",
		"evalue": text, "traceback": []string{"MessageTooLarge: " + text}})
}
