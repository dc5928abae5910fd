package jupyter_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
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
	if out, err := exec.Command(debianPython, "-c", "import nbclient, nbconvert").CombinedOutput(); err != nil {
		t.Fatalf("Debian's nbclient and nbconvert are not installed for %s (%v: %s): apt-get install -y python3-nbclient python3-nbconvert (.ci/run installs them)", debianPython, err, out)
	}
	bin := testbin.Linger(t)
	dir := t.TempDir()
	env := installKernelspec(t, bin, dir, filepath.Join(dir, "traces"))

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
