package kernel

import (
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlarkstruct"

	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

func TestRewritePinfo(t *testing.T) {
	call := func(indent, name string) string { return indent + pinfoVar + `("` + name + `")` }
	tests := []struct {
		name, code, want string
	}{
		{"alone", "engine?", call("", "engine")},
		{"two marks", "engine??", call("", "engine")},
		{"before", "?engine", call("", "engine")},
		{"dotted, indented, spaces after", "if True:\n    mem.stats?  \n", "if True:\n" + call("    ", "mem.stats") + "\n"},
		{"among statements", "x = 1\nx?\nprint(x)", "x = 1\n" + call("", "x") + "\nprint(x)"},
		{"crlf", "x = 1\r\nx?\r\n", "x = 1\r\n" + call("", "x") + "\r\n"},
		{"no mark", "engine", "engine"},
		{"both sides", "?engine?", "?engine?"},
		{"three marks", "engine???", "engine???"},
		{"in a short string", `s = "engine?"`, `s = "engine?"`},
		{"in a comment", "x = 1  # engine?\n# mem?", "x = 1  # engine?\n# mem?"},
		{"in a long string", "s = \"\"\"\nengine?\n\"\"\"\nt = '''\nmem?'''", "s = \"\"\"\nengine?\n\"\"\"\nt = '''\nmem?'''"},
		{"after a long string", "s = \"\"\"a\n\"\"\"\nengine?", "s = \"\"\"a\n\"\"\"\n" + call("", "engine")},
		{"escaped quote in a long string", "s = \"\"\"\\\"\"\"\"\nengine?", "s = \"\"\"\\\"\"\"\"\n" + call("", "engine")},
		{"in brackets", "x = [\n  engine?\n]", "x = [\n  engine?\n]"},
		{"quote in a comment", "# it's\nengine?", "# it's\n" + call("", "engine")},
		{"expression", "engine()?", "engine()?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rewritePinfo(tt.code); got != tt.want {
				t.Errorf("rewritePinfo(%q) = %q, want %q", tt.code, got, tt.want)
			}
		})
	}
}

// TestBindingDocs: every binding a cell sees, every member of its
// modules and every method of its values has a signature and a doc.
func TestBindingDocs(t *testing.T) {
	for name, v := range predeclared {
		if strings.HasPrefix(name, "__") {
			continue
		}
		if _, ok := bindingDocs[name]; !ok {
			t.Errorf("no doc for %s", name)
		}
		if m, ok := v.(*starlarkstruct.Module); ok && name != "math" {
			for _, n := range m.AttrNames() {
				if d, ok := bindingDocs[docKey(m.Members[n])]; !ok || d.params == "" || d.text == "" {
					t.Errorf("no signature or doc for %s.%s", name, n)
				}
			}
		}
	}
	for typ, ms := range map[string]methods{"Engine": engineMethods, "Workspace": workspaceMethods, "WorkspaceGuard": guardMethods,
		"BatchContext": batchMethods, "Scheduler": schedulerMethods, "KVCache": kvCacheMethods, "OutsideMemory": outsideMethods,
		"Tensor": tensorMethods, "Tokenizer": tokenizerMethods} {
		if _, ok := bindingDocs[typ]; !ok {
			t.Errorf("no doc for %s", typ)
		}
		for n := range ms {
			if d, ok := bindingDocs[typ+"."+n]; !ok || d.params == "" || d.text == "" {
				t.Errorf("no signature or doc for %s.%s", typ, n)
			}
		}
	}
	for key, d := range bindingDocs {
		for _, line := range strings.Split(d.text, "\n") {
			if n := len([]rune(line)); n > 80 {
				t.Errorf("%s: a doc line of %d characters, over 80: %q", key, n, line)
			}
		}
	}
}

// TestHelp runs help(obj) and obj? in cells: each prints the binding's
// signature and doc as a stream, as Shift+Tab's inspect_request shows
// it; a ? in a string is the string's.
func TestHelp(t *testing.T) {
	c := startKernel(t)
	run := func(t *testing.T, code string) string {
		t.Helper()
		ms := c.exec(code)
		if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
			t.Fatalf("%q: reply %v", code, rep)
		}
		out := ""
		for _, m := range ms {
			if m.Header.MsgType == "stream" {
				out += msgtest.Find([]*msg.Message{m}, "stream")["text"].(string)
			}
		}
		if r := msgtest.Find(ms, "execute_result"); r != nil {
			out += "result:" + r["data"].(map[string]any)["text/plain"].(string)
		}
		return out
	}
	engineHelp := "Signature: engine(model=\"qwen2-1.5b\", device=\"meta\""
	tests := []struct {
		name, code string
		want       []string
		not        []string
	}{
		{"help builtin", "help(engine)", []string{engineHelp, "Docstring:\nAn instrumented inference engine with its weights on a device.\n", "Type:      builtin_function_or_method"}, nil},
		{"pinfo builtin", "engine?", []string{engineHelp, "An instrumented inference engine"}, nil},
		{"pinfo twice", "engine??", []string{engineHelp}, nil},
		{"pinfo module member", "mem.stats?", []string{"Signature: mem.stats() → struct(allocated"}, nil},
		{"help method", "e = engine(model=\"tiny\")\nhelp(e.generate)", []string{"Signature: Engine.generate(prompt_tokens=0", "Runs one request"}, nil},
		{"pinfo method", "e.kv_cache?", []string{"Signature: e.kv_cache(max_tokens, expect=\"cell\") → KVCache"}, nil},
		{"pinfo value", "e?", []string{"Type:        Engine\nString form: Engine#1(tiny", "Methods: generate"}, nil},
		{"pinfo in the same cell", "n = 42\nn?\nprint('after')", []string{"Type:        int\nString form: 42", "after"}, nil},
		{"user function", "def f(a, b=2, *args, c=3, **kw):\n    \"Adds.\"\n    return a\nf?", []string{"Signature: f(a, b=2, *args, c=3, **kw)", "Docstring: Adds.", "Type:      function", "Defined:   Cell In[9], line 1"}, nil},
		{"help user function", "help(f)", []string{"Signature: f(a, b=2, *args, c=3, **kw)"}, nil},
		{"universe", "len?", []string{"Signature: len(x)"}, nil},
		{"not found", "nope?", []string{"Object `nope` not found."}, nil},
		{"overview", "help()", []string{"Bindings (help(obj) or obj? for one):", "  engine       An instrumented", "  help "}, []string{pinfoVar}},
		{"string left alone", "s = \"engine?\"  # mem?\ns", []string{`result:"engine?"`}, []string{"Signature"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := run(t, tt.code)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("%q printed\n%s\nwant it to hold %q", tt.code, out, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("%q printed\n%s\nwant it without %q", tt.code, out, w)
				}
			}
		})
	}
	// Shift+Tab shows the same.
	r := msgtest.Find(c.collect(c.request("shell", "inspect_request", map[string]any{"code": "x = engine(", "cursor_pos": 6, "detail_level": 0}, nil), 5*time.Second), "inspect_reply")
	if r["found"] != true || !strings.HasPrefix(r["data"].(map[string]any)["text/plain"].(string), engineHelp) {
		t.Errorf("inspect engine: %v", r)
	}
	// The kernel's own name is not offered.
	r = msgtest.Find(c.collect(c.request("shell", "complete_request", map[string]any{"code": "__", "cursor_pos": 2}, nil), 5*time.Second), "complete_reply")
	if m := r["matches"].([]any); len(m) != 0 {
		t.Errorf("complete __: %v", m)
	}
}
