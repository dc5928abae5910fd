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
