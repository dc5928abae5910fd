// The server's REST API as the pages use it. Authentication is the token
// cookie the server set on the first visit; every unsafe request also sends
// the _xsrf cookie's value in X-XSRFToken, as Jupyter requires.

/** The server's base URL path ("/" or "/prefix/"), from <body data-base>. */
export const base = document.body.dataset.base || "/";

/** Escapes each segment of a contents path for use in a URL. */
export function escapePath(p) {
  return p.split("/").map(encodeURIComponent).join("/");
}

function cookie(name) {
  for (const part of document.cookie.split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === name) return decodeURIComponent(v.join("="));
  }
  return "";
}

/** An HTTP error with the server's message (Jupyter's {"message": …}). */
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Calls base+path with a JSON body and returns the parsed JSON reply (or null). */
export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (!["GET", "HEAD"].includes(method)) headers["X-XSRFToken"] = cookie("_xsrf");
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(base + path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = { message: text };
    }
  }
  if (!res.ok) {
    const msg = (data && (data.message || data.reason)) || res.statusText;
    throw new APIError(res.status, `${method} ${path}: ${res.status} ${msg}`);
  }
  return data;
}

export const contents = {
  get: (path, type) => api("GET", `api/contents/${escapePath(path)}?content=1${type ? "&type=" + type : ""}`),
  save: (path, model) => api("PUT", `api/contents/${escapePath(path)}`, model),
  create: (dir, type) => api("POST", `api/contents/${escapePath(dir)}`, { type }),
  rename: (path, to) => api("PATCH", `api/contents/${escapePath(path)}`, { path: to }),
  remove: (path) => api("DELETE", `api/contents/${escapePath(path)}`),
};

export const kernels = {
  get: (id) => api("GET", `api/kernels/${encodeURIComponent(id)}`),
  interrupt: (id) => api("POST", `api/kernels/${encodeURIComponent(id)}/interrupt`),
  restart: (id) => api("POST", `api/kernels/${encodeURIComponent(id)}/restart`),
};

export const sessions = {
  /**
   * Starts (or finds, as Jupyter does) the session of a notebook, on the
   * kernelspec of that name ("" for the server's default).
   */
  create: (path, kernelName) =>
    api("POST", "api/sessions", { path, type: "notebook", name: path.split("/").pop(), ...(kernelName ? { kernel: { name: kernelName } } : {}) }),
  /** Replaces the session's kernel with a new one of that spec, as @jupyterlab/services' changeKernel does. */
  changeKernel: (id, kernelName) => api("PATCH", `api/sessions/${encodeURIComponent(id)}`, { kernel: { name: kernelName } }),
  /** Moves the session to the notebook's new path (after a rename). */
  rename: (id, path) => api("PATCH", `api/sessions/${encodeURIComponent(id)}`, { path, name: path.split("/").pop() }),
};

/** A short random id (hex), for cell ids and message ids. */
export function newID(bytes = 8) {
  const a = new Uint8Array(bytes);
  crypto.getRandomValues(a);
  return Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
}
