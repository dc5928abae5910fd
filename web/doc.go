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
// The notebook page has Jupyter's keyboard (web/ui/src/notebook/keys.js
// lists it, and the toolbar's Keys button, or H or ? in command mode,
// shows the list in a dialog). Edit mode is a cell's editor having the
// focus: Shift-Enter runs and edits the next cell (a new one after the
// last), Ctrl-Enter runs in place, Alt-Enter runs and inserts below,
// Ctrl-S saves. Esc leaves the editor for command mode, where the selected
// cell itself has the focus (the cells' data-mode="command", the cell's
// class "command") and single keys act on it: Enter edits, Shift-Enter,
// Ctrl-Enter and Alt-Enter run as above, A and B insert above and below,
// D D deletes, Z undoes the last delete, M and Y make the cell Markdown
// and code, J K and the arrows move the selection, I I interrupts, 0 0
// restarts (asking first). Keys typed in an editor, a field or a dialog
// are never commands. Restart and Restart & Run all ask first in a modal
// dialog (a native <dialog>, aria-modal, the focus kept inside it and
// given back on close), as JupyterLab does.
//
// Elements that tests and the browser code find carry data-testid
// attributes; their names are part of the contract with the browser tests
// and the timeline code, so renaming one is an API change.
package web
