package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unsafe"

	"linger/probe"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

// Chunks are at most n bytes, cut before a space (never inside a word),
// and put back together they are the text.
func TestGatewayChunks(t *testing.T) {
	text := []byte(strings.Repeat(" the and con", 1000)) // 12,000 bytes of 4-byte words
	got := chunks(text, 2048)
	if !bytes.Equal(bytes.Join(got, nil), text) {
		t.Fatal("the chunks are not the text")
	}
	for i, c := range got {
		if len(c) > 2048 || c[0] != ' ' || (i < len(got)-1 && len(c) != 2048) {
			t.Errorf("chunk %d: %d bytes starting %q; want 2048 (4-byte words fill it), each starting at a word", i, len(c), c[:4])
		}
	}
	if got := chunks([]byte(strings.Repeat("x", 5000)), 2048); len(got) != 3 || len(got[0]) != 2048 {
		t.Errorf("a text without spaces: %d chunks; want cut at 2048", len(got))
	}
}

// The leaky preview is a slice of the body, whose array it keeps whole;
// the body's probe object is freed only when the request and the preview
// have both let go. The fixed preview is a copy.
func TestGatewayPreview(t *testing.T) {
	p, err := probe.New(probe.Options{Name: "gateway", Sink: eventtest.Strict(t)})
	if err != nil {
		t.Fatal(err)
	}
	req := p.Begin(event.ScopeRequest, "POST /v1/generate")
	data := bytes.Repeat([]byte("0123456789"), 100)
	b := newBody(data, req.Alloc(event.CategoryOther, "request body", uint64(len(data)), event.ScopeRequest))
	leaky, release := preview(b, true)
	fixed, _ := preview(b, false)
	if string(leaky) != string(data[100:200]) || string(fixed) != string(data[100:200]) {
		t.Fatalf("previews %q, %q; want data[100:200]", leaky, fixed)
	}
	if unsafe.SliceData(leaky) != &data[100] || unsafe.SliceData(fixed) == &data[100] {
		t.Error("the leaky preview should share the body's array, the fixed one not")
	}
	b.release()
	req.End()
	if st := p.Stats(); st.Lingering != uint64(len(data)) {
		t.Errorf("lingering %d B with the preview kept; want the body's %d", st.Lingering, len(data))
	}
	release()
	release() // a second release does nothing
	if st := p.Stats(); st.Lingering != 0 || st.Live != 0 {
		t.Errorf("lingering %d B, live %d B after the preview went; want 0", st.Lingering, st.Live)
	}
}

// A gateway without Redis answers a request with the cache "off", and
// refuses bad input with a clear 4xx: a bad tenant or max_new_tokens, an
// empty prompt, a body over the bound, a prompt longer than the context.
// With --leak-substring each request's body lingers whole; without, none.
func TestGatewayBadInput(t *testing.T) {
	for _, leaky := range []bool{false, true} {
		p, err := probe.New(probe.Options{Name: "gateway", Sink: eventtest.Strict(t)})
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(Options{Model: "tiny", Engines: 1, ChunkTokens: 64, MaxBodyBytes: 64 << 10, Probe: p, Leaks: Leaks{Substring: leaky}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Handler())
		post := func(query, body string) (int, string) {
			resp, err := http.Post(srv.URL+"/v1/generate"+query, "text/plain", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		prompt := strings.Repeat(" the", 1000)
		code, body := post("?tenant=acme&max_new_tokens=2", prompt)
		var r Response
		if code != 200 || json.Unmarshal([]byte(body), &r) != nil || r.PromptTokens != 1000 || r.Chunks != 16 || len(r.Tokens) != 2 || r.Cache != cacheOff || r.Tenant != "acme" {
			t.Errorf("a good request: %d %s; want 1000 tokens in 16 chunks of 64 tokens, 2 generated, cache off", code, body)
		}
		for _, c := range []struct {
			query, body string
			code        int
			want        string
		}{
			{"?tenant=Acme!", prompt, 400, "tenant"},
			{"?max_new_tokens=17", prompt, 400, "max_new_tokens"},
			{"?max_new_tokens=x", prompt, 400, "max_new_tokens"},
			{"", "", 400, "empty prompt"},
			{"", strings.Repeat(" the", 20000), 413, "request body over 65536 bytes"},
			{"", strings.Repeat(" the", 5000), 400, "longer than the model's context of 4096"},
		} {
			if code, body := post(c.query, c.body); code != c.code || !strings.Contains(body, c.want) {
				t.Errorf("%s with %d bytes: %d %q; want %d %q", c.query, len(c.body), code, body, c.code, c.want)
			}
		}
		srv.Close()
		want := uint64(0)
		if leaky {
			want = 4 * 1000 // the good request's body: refused ones are not indexed
		}
		if st := p.Stats(); st.Lingering != want {
			t.Errorf("leaky %v: %d B lingering; want %d", leaky, st.Lingering, want)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	}
}
