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
// given back on close), as JupyterLab does. The notebook's title is a
// button that renames it (title.js): a field, Enter or leaving it renames
// the file, Esc keeps the name, and a refusal (a name taken) is said in
// the alert beside it. An error output shows its heading ("NameError: …")
// and its traceback without the traceback's last line when that repeats
// the heading, so an error reads once.
//
// The root page lists the running kernels (RunningKernels: each by its
// notebook, with a Shutdown button that tree.js answers with DELETE
// /api/kernels/ID) and marks the saved traces a running kernel is writing
// live. The notebook page's docked timeline follows the kernel's current
// process across restarts and offers the earlier runs (timeline.js; see
// docs/timeline.md).
//
// Elements that tests and the browser code find carry data-testid
// attributes; their names are part of the contract with the browser tests
// and the timeline code, so renaming one is an API change.
package web
