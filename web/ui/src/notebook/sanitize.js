// An allowlist HTML sanitizer for kernel HTML outputs and rendered
// markdown. It parses into an inert document (nothing runs or loads there),
// keeps only the tags and attributes below, and returns a fragment of the
// page's document. Unknown tags are unwrapped (their text stays); tags that
// carry code or forms are dropped whole.

const KEEP = new Set(
  ("a abbr b blockquote br caption code col colgroup dd del details div dl dt em h1 h2 h3 h4 h5 h6 hr i img " +
    "kbd label li mark meter ol p pre progress q s samp small span strong sub summary sup table tbody td tfoot th " +
    "thead tr u ul var").split(" "),
);
const DROP = new Set("script style iframe frame frameset object embed applet form input button select textarea link meta base svg math template noscript".split(" "));
const ATTRS = new Set("class title alt colspan rowspan align width height value max min open start type lang dir scope aria-label".split(" "));

function safeURL(u, img, download) {
  const s = u.trim();
  if (img && /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*$/i.test(s)) return true;
  // A file to save (a profile's .pprof): never shown, so never run.
  if (download && /^data:application\/octet-stream;base64,[A-Za-z0-9+/=\s]*$/i.test(s)) return true;
  if (s.startsWith("#")) return true;
  try {
    const url = new URL(s, location.href);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}

function clean(node) {
  for (const child of Array.from(node.childNodes)) {
    if (child.nodeType === Node.COMMENT_NODE) {
      child.remove();
      continue;
    }
    if (child.nodeType !== Node.ELEMENT_NODE) continue;
    const tag = child.localName;
    if (DROP.has(tag)) {
      child.remove();
      continue;
    }
    clean(child);
    if (!KEEP.has(tag)) {
      child.replaceWith(...child.childNodes);
      continue;
    }
    for (const a of Array.from(child.attributes)) {
      const name = a.name.toLowerCase();
      const urlAttr = (name === "href" && tag === "a") || (name === "src" && tag === "img");
      const download = tag === "a" && child.hasAttribute("download");
      if (name === "download" && tag === "a") continue;
      if (urlAttr ? !safeURL(a.value, tag === "img", download) : !ATTRS.has(name)) child.removeAttribute(a.name);
    }
    if (tag === "a" && child.hasAttribute("download") && !child.getAttribute("href")?.startsWith("data:")) child.removeAttribute("download");
    if (tag === "a" && child.hasAttribute("href") && !child.getAttribute("href").startsWith("#") && !child.hasAttribute("download")) {
      child.setAttribute("target", "_blank");
      child.setAttribute("rel", "noopener noreferrer");
    }
  }
}

/** Returns a DocumentFragment of the page holding html made safe. */
export function sanitize(html) {
  const doc = new DOMParser().parseFromString(`<!DOCTYPE html><body>${html}`, "text/html");
  clean(doc.body);
  const frag = document.createDocumentFragment();
  for (const n of Array.from(doc.body.childNodes)) frag.append(document.importNode(n, true));
  return frag;
}
