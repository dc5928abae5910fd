package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"sync"
)

//go:embed static
var staticFiles embed.FS

// Static holds the embedded assets (the bundles built by `make ui` and the
// stylesheet) at its root, e.g. "notebook.js". It is read-only and safe for
// concurrent use.
var Static fs.FS = mustSub(staticFiles, "static")

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

// The icons: FaviconSVG is what the pages link; FaviconICO, the same
// drawn at 32×32 (a PNG in an ICO), is what the server answers at
// /favicon.ico for browsers that ask there regardless.
const (
	FaviconSVG = "favicon.svg"
	FaviconICO = "favicon.ico"
)

// assetHashes maps each embedded asset to a short hash of its content; pages
// link assets as static/NAME?v=HASH so a browser never runs a stale bundle
// after an upgrade, and StaticHandler can let it cache them for good.
var assetHashes = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	_ = fs.WalkDir(Static, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Static, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[p] = hex.EncodeToString(sum[:6])
		return nil
	})
	return m
})

// assetURL returns the cache-busting URL of an embedded asset, or "" when
// the asset is not embedded (e.g. a bundle another engineer has not built
// yet), so that a page leaves it out rather than linking a 404.
func assetURL(base, name string) string {
	h, ok := assetHashes()[name]
	if !ok {
		return ""
	}
	return base + "static/" + name + "?v=" + h
}

// StaticHandler serves Static. Mount it with its prefix stripped, e.g.
//
//	mux.Handle("GET /static/", http.StripPrefix("/static/", web.StaticHandler()))
//
// A request whose ?v= matches the asset's content hash (the URLs the pages
// use) may be cached forever; any other is revalidated.
func StaticHandler() http.Handler {
	files := http.FileServerFS(Static)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("v"); v != "" && v == assetHashes()[r.URL.Path] {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(w, r)
	})
}
