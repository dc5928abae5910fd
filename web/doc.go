// Package web holds Linger's pages: templ components, the plain view models
// they render, and the embedded static assets (the esbuild bundles built
// from web/ui, the stylesheet and the icon: favicon.svg, which every page
// links, and favicon.ico, the same as a 32×32 PNG in an ICO, which the
// server answers at /favicon.ico).
//
// The package knows no domain type. A handler in the server turns notebooks,
// directory listings and traces into the view models here (TreeView,
// NotebookView, TimelineView) and renders a component with them; every
// interactive part then talks to the server's REST and websocket API from
// the browser. The token never appears in a page: the server puts it in an
// HttpOnly cookie, and the scripts send the _xsrf cookie's value in the
// X-XSRFToken header on every unsafe request.
//
// Elements that tests and the browser code find carry data-testid
// attributes; their names are part of the contract with the browser tests
// and the timeline code, so renaming one is an API change.
package web
