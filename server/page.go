package server

import (
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// treePage is the placeholder for the notebook browser until the web UI
// exists: it lists the directory and links each notebook to its JSON
// through the contents API, and says plainly that the UI is not built.
var treePage = template.Must(template.New("tree").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Linger: {{.Dir}}</title></head>
<body>
<h1>Linger</h1>
<p>The notebook UI is not built yet. Any Jupyter client can use this server's
API (<code>/api</code>); the links below are the raw notebook JSON.</p>
<h2 data-testid="dir">/{{.Dir}}</h2>
<ul>
{{- if .Parent}}<li><a href="{{.Parent}}">..</a></li>{{end}}
{{- range .Entries}}
<li data-testid="entry"><a href="{{.Href}}">{{.Name}}</a>{{if .Dir}}/{{end}}</li>
{{- else}}
<li>(empty)</li>
{{- end}}
</ul>
</body></html>
`))

type treeEntry struct {
	Name string
	Href string
	Dir  bool
}

func (s *Server) handleTree(w http.ResponseWriter, r *http.Request) {
	dir := strings.Trim(r.PathValue("path"), "/")
	model, err := s.contents.Get(r.Context(), dir, contentsQuery{Type: "directory", Content: true})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The model is the store's; only the Jupyter fields are read.
	var listing struct {
		Content []struct {
			Name string `json:"name"`
			Path string `json:"path"`
			Type string `json:"type"`
		} `json:"content"`
	}
	b, err := json.Marshal(model)
	if err == nil {
		err = json.Unmarshal(b, &listing)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	base := s.opts.BaseURL
	data := struct {
		Dir     string
		Parent  string
		Entries []treeEntry
	}{Dir: dir}
	if dir != "" {
		data.Parent = base + "tree/" + escapePath(path.Dir(dir))
		if path.Dir(dir) == "." {
			data.Parent = base + "tree/"
		}
	}
	for _, e := range listing.Content {
		t := treeEntry{Name: e.Name, Dir: e.Type == "directory"}
		if t.Dir {
			t.Href = base + "tree/" + escapePath(e.Path)
		} else {
			t.Href = base + "api/contents/" + escapePath(e.Path)
		}
		data.Entries = append(data.Entries, t)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := treePage.Execute(w, data); err != nil {
		s.log.Error("render tree", "err", err)
	}
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}
