package jupyter_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"linger/internal/testbin"
)

// TestNbconvertPlot has Debian's nbconvert execute scenario 01 in the
// installed kernel with two cells added, timeline.plot() over the
// session and over the serving loop that leaks (In [4]): each result
// has an SVG that parses, with lingering marks, a PNG that decodes, and
// the summary as text/plain, as JupyterLab, VS Code and nbconvert's HTML
// show them without Linger's timeline.
func TestNbconvertPlot(t *testing.T) {
	needPython(t, "nbclient, nbconvert", "python3-nbclient python3-nbconvert")
	_, dir, _, env := installedKernel(t)

	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "01-kv-cache-reference.ipynb"))
	if err != nil {
		t.Fatal(err)
	}
	var nb map[string]any
	if err := json.Unmarshal(b, &nb); err != nil {
		t.Fatal(err)
	}
	plots := []string{"timeline.plot()", "timeline.plot(cell=4)"}
	for i, code := range plots {
		nb["cells"] = append(nb["cells"].([]any), map[string]any{"cell_type": "code", "id": "plot" + string(rune('a'+i)),
			"metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil, "source": code})
	}
	b, _ = json.Marshal(nb)
	in := filepath.Join(dir, "scenario-plot.ipynb")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(nbconvertExecute(t, env, in, filepath.Join(dir, "out")))
	if err != nil {
		t.Fatal(err)
	}
	var executed struct {
		Cells []struct {
			Source  any `json:"source"`
			Outputs []struct {
				OutputType string         `json:"output_type"`
				Data       map[string]any `json:"data"`
				Ename      string         `json:"ename"`
				Evalue     string         `json:"evalue"`
			} `json:"outputs"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(out, &executed); err != nil {
		t.Fatal(err)
	}
	cells := executed.Cells[len(executed.Cells)-len(plots):]
	for i, c := range cells {
		var data map[string]any
		for _, o := range c.Outputs {
			if o.OutputType == "error" {
				t.Fatalf("%s: %s: %s", plots[i], o.Ename, o.Evalue)
			}
			if o.OutputType == "execute_result" {
				data = o.Data
			}
		}
		svg, b64, plain := joinText(data["image/svg+xml"]), joinText(data["image/png"]), joinText(data["text/plain"])
		if svg == "" || b64 == "" || plain == "" {
			t.Fatalf("%s: execute_result data %v", plots[i], data)
		}
		var doc struct {
			Paths []struct {
				Class string `xml:"class,attr"`
			} `xml:"path"`
		}
		if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
			t.Fatalf("%s: the SVG does not parse: %v", plots[i], err)
		}
		marks := 0
		for _, p := range doc.Paths {
			if p.Class == "lingering" {
				marks++
			}
		}
		raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(b64), ""))
		if err != nil {
			t.Fatalf("%s: image/png: %v", plots[i], err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: image/png: %v", plots[i], err)
		}
		// Scenario 01 leaves the first request's cache (In [3]) and the
		// eight the hooks hold (In [4]) lingering.
		if marks == 0 || !strings.Contains(plain, "lingering objects (") {
			t.Errorf("%s: %d lingering marks; text/plain %q", plots[i], marks, plain)
		}
		if d := os.Getenv("LINGER_PLOT_DIR"); d != "" { // to look at
			_ = os.WriteFile(filepath.Join(d, "scenario01-"+string(rune('a'+i))+".svg"), []byte(svg), 0o644)
			_ = os.WriteFile(filepath.Join(d, "scenario01-"+string(rune('a'+i))+".png"), raw, 0o644)
		}
		t.Logf("%s: %q; SVG %d bytes, PNG %d bytes (%v)", plots[i], plain, len(svg), len(raw), img.Bounds().Size())
	}
}

// TestPlotLinksToServe: a plot in a kernel that a Jupyter frontend
// started is also text/html (JupyterLab and nbconvert's HTML show that
// first): the picture, its summary and, with a linger serve running that
// lists the kernels' traces, a link that opens the kernel's trace in its
// timeline; without one, where the trace is. The server lists that trace
// as a Jupyter kernel's, opens it, and refuses to delete it.
func TestPlotLinksToServe(t *testing.T) {
	needPython(t, "nbclient, nbconvert", "python3-nbclient python3-nbconvert")
	bin := testbin.Linger(t)
	dir := t.TempDir()
	traces := filepath.Join(dir, "traces")
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(dir, "runtime"))
	t.Setenv("LINGER_TRACE_DIR", traces)
	env := installKernelspec(t, bin, dir, traces)
	nb := map[string]any{
		"nbformat": 4, "nbformat_minor": 5,
		"metadata": map[string]any{"kernelspec": map[string]any{"name": "linger", "display_name": "Linger (Starlark)", "language": "starlark"}},
		"cells": []any{map[string]any{"cell_type": "code", "id": "p", "metadata": map[string]any{}, "outputs": []any{}, "execution_count": nil,
			"source": "kept = tensor((1024, 1024), dtype=\"f32\", category=\"kv_cache\")\ntimeline.plot()"}},
	}
	in := filepath.Join(dir, "linked.ipynb")
	b, _ := json.Marshal(nb)
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	html := func(outDir string) string {
		t.Helper()
		out, err := os.ReadFile(nbconvertExecute(t, env, in, filepath.Join(dir, outDir)))
		if err != nil {
			t.Fatal(err)
		}
		var executed struct {
			Cells []struct {
				Outputs []nbOutput `json:"outputs"`
			} `json:"cells"`
		}
		if err := json.Unmarshal(out, &executed); err != nil {
			t.Fatal(err)
		}
		for _, o := range executed.Cells[0].Outputs {
			if o.OutputType == "error" {
				t.Fatalf("the cell failed: %s: %s", o.Ename, o.Evalue)
			}
			if o.OutputType == "execute_result" {
				return joinText(o.Data["text/html"])
			}
		}
		t.Fatalf("no result: %+v", executed.Cells[0].Outputs)
		return ""
	}

	// No server runs: the HTML says where the trace is.
	alone := html("alone")
	if !strings.Contains(alone, `<img src="data:image/svg+xml;base64,`) || !strings.Contains(alone, "<code>"+traces+string(filepath.Separator)) ||
		strings.Contains(alone, "<a href") {
		t.Errorf("without a server, the plot's HTML:\n%.600s", alone)
	}

	srv := startServer(t, bin)
	defer srv.stop(t)
	linked := html("linked")
	m := regexp.MustCompile(`<a href="(http://[^"]+/timeline/([^"/]+\.ltrace))"`).FindStringSubmatch(linked)
	if m == nil {
		t.Fatalf("with linger serve running, the plot's HTML has no link to its timeline:\n%.800s", linked)
	}
	if _, err := os.Stat(filepath.Join(traces, m[2])); err != nil {
		t.Errorf("the link names %s, not a trace the kernel wrote: %v", m[2], err)
	}
	// nbconvert's HTML shows the figure: the picture and the link.
	conv := exec.Command(debianPython, "-m", "nbconvert", "--to", "html", "--output-dir", filepath.Join(dir, "html"), filepath.Join(dir, "linked", "executed.ipynb"))
	conv.Env = env
	if out, err := conv.CombinedOutput(); err != nil {
		t.Fatalf("nbconvert --to html: %v\n%s", err, out)
	}
	page, err := os.ReadFile(filepath.Join(dir, "html", "executed.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `<figure class="linger-plot"`) || !strings.Contains(string(page), m[1]) {
		t.Errorf("nbconvert's HTML lacks the plot's figure and link")
	}
	get := func(method, u string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, nil)
		req.Header.Set("Authorization", "token "+srv.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", m[1]); code != 200 || !strings.Contains(body, m[2]) {
		t.Errorf("GET %s: %d\n%.300s", m[1], code, body)
	}
	base := strings.TrimSuffix(m[1], "timeline/"+m[2])
	if code, body := get("GET", base); code != 200 || !strings.Contains(body, `data-name="`+m[2]+`"`) || !strings.Contains(body, `data-testid="trace-jupyter"`) {
		t.Errorf("the root page does not list %s as a Jupyter kernel's trace (%d)", m[2], code)
	}
	if code, body := get("DELETE", base+"api/timeline/traces/"+m[2]); code != 403 {
		t.Errorf("DELETE a Jupyter kernel's trace: %d %s, want 403", code, body)
	}
	if _, err := os.Stat(filepath.Join(traces, m[2])); err != nil {
		t.Errorf("the trace is gone: %v", err)
	}
}
