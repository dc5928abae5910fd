package server

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDocRoutes: the route table of doc.go and the routes the server
// registers are the same, both ways: a route added without its line, or a
// line left for a route removed, fails here.
func TestDocRoutes(t *testing.T) {
	ts := newTestServer(t, nil)
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// "//	GET    /api/kernels/{id}    kernel model": a method, then paths
	// (several for one line: "/, /tree/{path}"), then what it does.
	line := regexp.MustCompile(`(?m)^//\t(GET|POST|PUT|PATCH|DELETE) +(.+?)(?: {2,}|$)`)
	param := regexp.MustCompile(`\{(\w+)(\.\.\.)?\}`)
	norm := func(p string) string {
		if p = strings.ReplaceAll(p, "{$}", ""); p != "/" {
			p = strings.TrimSuffix(p, "/")
		}
		return param.ReplaceAllString(p, "{$1}")
	}
	type route struct{ method, path string }
	var documented []route
	for _, m := range line.FindAllStringSubmatch(string(src), -1) {
		for _, p := range strings.Split(m[2], ", ") {
			p = strings.TrimSuffix(p, ",")
			if a, b, ok := strings.Cut(p, "[/"); ok { // "/api/kernelspecs[/{name}]": both
				documented = append(documented, route{m[1], norm(a)}, route{m[1], norm(a + "/" + strings.TrimSuffix(b, "]"))})
				continue
			}
			documented = append(documented, route{m[1], norm(p)})
		}
	}
	if len(documented) < 30 {
		t.Fatalf("read %d documented routes from doc.go; the table's format changed?", len(documented))
	}
	// A documented path ending in "/..." stands for the routes below it.
	covers := func(d route, method, path string) bool {
		if d.method != method && method != "" {
			return false
		}
		if prefix, ok := strings.CutSuffix(d.path, "..."); ok {
			return strings.HasPrefix(path+"/", prefix)
		}
		return d.path == path
	}
	var registered []route
	for _, pat := range ts.s.patterns {
		method, path, ok := strings.Cut(pat, " ")
		if !ok {
			method, path = "", pat
		}
		registered = append(registered, route{method, norm(path)})
	}
	// Catch-alls answer what no route does; they are not routes of the table.
	isCatchAll := func(r route) bool { return r.path == "/api/{rest}" || (r.method == "" && r.path == "/api/contents") }
	for _, r := range registered {
		if isCatchAll(r) {
			continue
		}
		if !slices.ContainsFunc(documented, func(d route) bool {
			if r.method == "" { // the contents handler serves every method below its path
				return strings.HasPrefix(d.path, strings.TrimSuffix(r.path, "{path}"))
			}
			return covers(d, r.method, r.path)
		}) {
			t.Errorf("route %s %s is not in doc.go's table", r.method, r.path)
		}
	}
	for _, d := range documented {
		if !slices.ContainsFunc(registered, func(r route) bool {
			if r.method == "" && !isCatchAll(r) {
				return strings.HasPrefix(d.path, strings.TrimSuffix(r.path, "{path}"))
			}
			if prefix, ok := strings.CutSuffix(d.path, "..."); ok {
				return r.method == d.method && strings.HasPrefix(r.path+"/", prefix)
			}
			return r.method == d.method && r.path == d.path
		}) {
			t.Errorf("doc.go's table has %s %s, which the server does not register", d.method, d.path)
		}
	}
}
