// el builds a DOM element: attrs sets class, on* listeners and attributes;
// kids are appended, null and undefined left out (an optional part). The
// timeline's panels (view, detail, legend, segments) all build with it.
export function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) e.append(k);
  return e;
}

/**
 * menu is a toolbar disclosure: a button that opens a group of controls
 * below it (a details element: keyboard and screen readers know it),
 * closed again by Escape, a click outside, or opening another; its
 * listener on the document goes when signal aborts (the view's destroy).
 */
export function menu(label, testid, title, kids, signal) {
  const body = el("div", { class: "lt-menu-body", role: "group", "aria-label": label }, ...kids);
  const d = el("details", { class: "lt-menu", "data-testid": testid }, el("summary", { class: "lt-btn button", title }, label), body);
  d.addEventListener("toggle", () => {
    if (!d.open) return;
    for (const o of d.closest(".lt-toolbar")?.querySelectorAll("details.lt-menu[open]") || []) if (o !== d) o.open = false;
  });
  d.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && d.open) { d.open = false; d.querySelector("summary").focus(); ev.stopPropagation(); } });
  document.addEventListener("pointerdown", (ev) => { if (d.open && !d.contains(ev.target)) d.open = false; }, { signal });
  return d;
}
