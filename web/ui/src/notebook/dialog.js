// Modal dialogs of the notebook page: a question with Cancel and an
// accepting button (JupyterLab's "Restart kernel?"), and the list of
// keyboard shortcuts. Each is a native <dialog> opened with showModal
// (the rest of the page inert, Esc closes it), with aria-modal and a
// label; Tab and Shift-Tab cycle within it, and closing it gives the
// focus back to the element that had it.

let seq = 0;

function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v;
    else if (k === "testid") e.dataset.testid = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

function focusables(d) {
  return [...d.querySelectorAll("button, [href], input, select, textarea, [tabindex]:not([tabindex='-1'])")].filter((e) => !e.disabled && e.getClientRects().length);
}

/**
 * open shows dialog d modally, focusing first (else its first control);
 * resolves with d.returnValue when it closes, the focus back where it was.
 */
function open(d, first) {
  const back = document.activeElement;
  document.body.append(d);
  d.addEventListener("keydown", (ev) => {
    if (ev.key !== "Tab") return;
    const f = focusables(d);
    if (!f.length) return;
    const i = f.indexOf(document.activeElement);
    if (ev.shiftKey && i <= 0) {
      ev.preventDefault();
      f[f.length - 1].focus();
    } else if (!ev.shiftKey && i === f.length - 1) {
      ev.preventDefault();
      f[0].focus();
    }
  });
  return new Promise((resolve) => {
    d.addEventListener("close", () => {
      d.remove();
      if (back && back.isConnected && back !== document.body) back.focus({ preventScroll: true });
      resolve(d.returnValue);
    });
    d.returnValue = "";
    d.showModal();
    (first || focusables(d)[0])?.focus();
  });
}

function base(testid, title) {
  const id = `dialog-title-${++seq}`;
  const d = el("dialog", { class: "nb-dialog", testid, "aria-modal": "true", "aria-labelledby": id });
  d.append(el("h2", { id }, title));
  return d;
}

/**
 * confirm asks a question: title, text, and the accepting button's label
 * (with danger, drawn as a destructive action). Resolves true when it is
 * pressed; false on Cancel or Esc. The accepting button has the focus, as
 * in JupyterLab: Enter accepts.
 */
export function confirm({ title, text, accept, danger = false, testid = "confirm-dialog" }) {
  const d = base(testid, title);
  const p = el("p", { testid: "dialog-text" }, text);
  const cancel = el("button", { type: "button", testid: "dialog-cancel" }, "Cancel");
  const ok = el("button", { type: "button", testid: "dialog-accept", class: danger ? "danger" : "primary" }, accept);
  cancel.addEventListener("click", () => d.close(""));
  ok.addEventListener("click", () => d.close("accept"));
  d.setAttribute("aria-describedby", (p.id = `${d.getAttribute("aria-labelledby")}-text`));
  d.append(p, el("div", { class: "dialog-buttons" }, cancel, ok));
  return open(d, ok).then((v) => v === "accept");
}

/**
 * shortcuts lists the keys: groups is [{title, keys: [[keys, what]]}],
 * where keys is a list of key names shown as <kbd>, "," between
 * alternatives and "then" in a sequence written "D D".
 */
export function shortcuts(groups) {
  const d = base("shortcuts-dialog", "Keyboard shortcuts");
  d.classList.add("shortcuts");
  // The list scrolls between the title and Close, both always in view:
  // focusing Close at the end of one long scrolling box opened it
  // scrolled to the bottom, its title cut off. Focusable, so that the
  // keyboard scrolls it too.
  const body = el("div", { class: "dialog-body", tabindex: "0", role: "region", "aria-labelledby": d.getAttribute("aria-labelledby") });
  body.append(el("p", {}, "Esc leaves a cell's editor for command mode, where single keys act on the selected cell; Enter goes back to editing it."));
  for (const g of groups) {
    const rows = g.keys.map(([keys, what]) => {
      const k = el("th", { scope: "row" });
      keys.forEach((alt, i) => {
        if (i) k.append(", ");
        alt.split(" ").forEach((part, j) => {
          if (j) k.append(" then ");
          k.append(el("kbd", {}, part));
        });
      });
      return el("tr", {}, k, el("td", {}, what));
    });
    body.append(el("table", { class: "keys" }, el("caption", {}, g.title), el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Keys"), el("th", { scope: "col" }, "Does"))), el("tbody", {}, ...rows)));
  }
  const close = el("button", { type: "button", testid: "dialog-close", class: "primary" }, "Close");
  close.addEventListener("click", () => d.close(""));
  d.append(body, el("div", { class: "dialog-buttons" }, close));
  return open(d, close);
}
