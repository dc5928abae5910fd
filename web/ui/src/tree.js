// Entry of the notebook browser (/ and /tree/{dir}): new notebook, new
// folder, rename, delete, upload and download through the contents API;
// on the root page, saved traces renamed and deleted through theirs.
import { api, base, contents, escapePath } from "./notebook/api.js";

const main = document.querySelector("[data-testid=tree]");
const dir = main.dataset.dir || "";
const status = document.querySelector("[data-testid=tree-status]");

function say(text) {
  status.textContent = text;
}

async function act(what, fn) {
  say(what + "…");
  try {
    await fn();
  } catch (e) {
    say(`${what} failed: ${e.message}`);
    return false;
  }
  return true;
}

function join(d, name) {
  return d ? `${d}/${name}` : name;
}

function saveBlob(name, blob) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

async function download(path) {
  const m = await contents.get(path);
  let blob;
  if (m.type === "notebook") {
    blob = new Blob([JSON.stringify(m.content, null, 1) + "\n"], { type: "application/x-ipynb+json" });
  } else if (m.format === "base64") {
    blob = new Blob([Uint8Array.from(atob(m.content), (c) => c.charCodeAt(0))], { type: m.mimetype || "application/octet-stream" });
  } else {
    blob = new Blob([m.content], { type: m.mimetype || "text/plain" });
  }
  saveBlob(m.name, blob);
}

function base64(buf) {
  let s = "";
  const b = new Uint8Array(buf);
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

async function upload(file) {
  const path = join(dir, file.name);
  if (file.name.endsWith(".ipynb")) {
    const content = JSON.parse(await file.text());
    await contents.save(path, { type: "notebook", format: "json", content });
  } else {
    await contents.save(path, { type: "file", format: "base64", content: base64(await file.arrayBuffer()) });
  }
}

main.addEventListener("click", async (ev) => {
  const b = ev.target.closest("[data-action]");
  if (!b) return;
  const row = b.closest("[data-testid=entry]");
  const path = row?.dataset.path;
  switch (b.dataset.action) {
    case "new-notebook": {
      let created;
      if (await act("Creating a notebook", async () => (created = await contents.create(dir, "notebook")))) {
        location.href = base + "notebooks/" + escapePath(created.path);
      }
      break;
    }
    case "new-folder":
      if (await act("Creating a folder", () => contents.create(dir, "directory"))) location.reload();
      break;
    case "rename": {
      const old = path.split("/").pop();
      const name = prompt(`Rename ${old} to:`, old);
      if (!name || name === old) return;
      if (name.includes("/")) return say("A name cannot contain /.");
      if (await act(`Renaming ${old}`, () => contents.rename(path, join(dir, name)))) location.reload();
      break;
    }
    case "delete":
      if (!confirm(`Delete ${path}? This cannot be undone.`)) return;
      if (await act(`Deleting ${path}`, () => contents.remove(path))) location.reload();
      break;
    case "download":
      if (await act(`Downloading ${path}`, () => download(path))) say("");
      break;
    case "rename-trace": {
      // A saved trace (the traces list): renamed in the trace directory;
      // the server refuses one still being written, saying so.
      const old = b.closest("[data-testid=trace]").dataset.name;
      let name = prompt(`Rename the trace ${old} to:`, old)?.trim();
      if (!name || name === old) return;
      if (!name.endsWith(".ltrace")) name += ".ltrace";
      if (await act(`Renaming ${old}`, () => api("PATCH", `api/timeline/traces/${encodeURIComponent(old)}`, { name }))) location.reload();
      break;
    }
    case "delete-trace": {
      const name = b.closest("[data-testid=trace]").dataset.name;
      if (!confirm(`Delete the trace ${name}? This cannot be undone.`)) return;
      if (await act(`Deleting ${name}`, () => api("DELETE", `api/timeline/traces/${encodeURIComponent(name)}`))) location.reload();
      break;
    }
    case "shutdown-kernel": {
      // A running kernel (the Running kernels list): shut down, its row goes.
      const krow = b.closest("[data-testid=running-kernel]");
      const id = krow.dataset.kernelId;
      const what = krow.querySelector("[data-testid=running-notebook]")?.textContent || id;
      b.disabled = true;
      if (await act(`Shutting down the kernel of ${what}`, () => api("DELETE", `api/kernels/${encodeURIComponent(id)}`))) {
        const tbody = krow.parentElement;
        krow.remove();
        say(`Shut down the kernel of ${what}.`);
        if (!tbody.children.length) {
          const empty = document.createElement("p");
          empty.className = "hint";
          empty.dataset.testid = "running-empty";
          empty.textContent = "No kernels are running.";
          tbody.closest("table").replaceWith(empty);
        }
      } else b.disabled = false;
      break;
    }
  }
});

document.querySelector("[data-testid=upload]").addEventListener("change", async (ev) => {
  const files = Array.from(ev.target.files);
  let ok = true;
  for (const f of files) ok = (await act(`Uploading ${f.name}`, () => upload(f))) && ok;
  if (ok) location.reload();
});

// PyTorch memory snapshots (the root page): a file chosen or dropped is
// streamed to POST api/snapshots as the request's body (XMLHttpRequest,
// for its upload progress), then its import is followed (GET
// api/imports/{id}) to its trace, whose timeline opens. Imports of files
// that appeared in the trace directory are listed as they run.
const snapshots = document.querySelector("[data-testid=snapshots]");
if (snapshots) {
  const list = snapshots.querySelector("[data-testid=imports]");
  const drop = snapshots.querySelector("[data-testid=snapshot-drop]");
  const rows = new Map(); // job id, or a pending upload's key → <li>
  // The rules file chosen, read by the server at once (api/snapshots/rules:
  // what is wrong with it is said now, not after an upload), then sent
  // with each upload (api/snapshots' rules).
  const rulesInput = snapshots.querySelector("[data-testid=snapshot-rules]");
  const rulesState = snapshots.querySelector("[data-testid=snapshot-rules-state]");
  let rules = null; // {name, id}: the server keeps the rules read, by id
  const maxRules = 64 << 10; // the server's MaxUploadRules
  const rulesSay = (msg, bad) => {
    rulesState.textContent = msg;
    rulesState.className = bad ? "failed" : "";
    rulesInput.setCustomValidity(bad ? msg : "");
  };
  rulesInput.addEventListener("change", async () => {
    const f = rulesInput.files[0];
    rules = null;
    rulesSay("", false);
    if (!f) return;
    if (f.size > maxRules) return rulesSay(`${f.name}: ${f.size} bytes, over the ${maxRules} a rules file may have`, true);
    const text = await f.text();
    let parsed;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      return rulesSay(`${f.name}: not JSON: ${err.message}`, true);
    }
    try {
      const r = await api("POST", `api/snapshots/rules?${new URLSearchParams({ name: f.name })}`, parsed);
      rules = { name: f.name, id: r.id };
      rulesSay(`${f.name}: ${r.own} rules of yours, used for the snapshots you drop or choose next`, false);
    } catch (err) {
      rulesSay(err.message.replace(/^\S+ \S+: \d+ /, ""), true);
    }
  });

  const row = (key) => {
    let li = rows.get(key);
    if (!li) {
      li = document.createElement("li");
      li.dataset.testid = "import";
      li.innerHTML = `<span data-testid="import-name"></span> <progress data-testid="import-progress" max="1" value="0"></progress> <span data-testid="import-state"></span>`;
      list.prepend(li);
      rows.set(key, li);
    }
    return li;
  };
  const bytes = (n) => (n >= 1 << 30 ? `${(n / 2 ** 30).toFixed(1)} GiB` : n >= 1 << 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${Math.round(n / 1024)} KiB`);
  const show = (li, name, state, read, size, text) => {
    li.dataset.state = state;
    li.querySelector("[data-testid=import-name]").textContent = name;
    const bar = li.querySelector("[data-testid=import-progress]");
    if (size > 0) { bar.max = size; bar.value = Math.min(read, size); } else bar.removeAttribute("value");
    bar.hidden = state === "done" || state === "failed";
    bar.setAttribute("aria-label", `${name}: ${state}`);
    const st = li.querySelector("[data-testid=import-state]");
    st.className = state === "failed" ? "failed" : "";
    st.textContent = text;
  };
  const showJob = (j) => {
    const li = row(j.id);
    const pct = j.size > 0 ? ` ${bytes(j.read)} of ${bytes(j.size)} (${Math.floor((100 * j.read) / j.size)}%)` : "";
    const text = {
      receiving: `uploading…${pct}`, queued: "waiting for the import before it", importing: `reading the snapshot…${pct}`,
      failed: `failed: ${j.error}`, done: `${j.events} events${j.rules ? "; categories by " + j.rules : ""}${j.note ? "; " + j.note : ""}`,
    }[j.state] || j.state;
    show(li, j.snapshot, j.state, j.read, j.size, text);
    if (j.state === "done" && !li.querySelector("a")) {
      const a = document.createElement("a");
      a.dataset.testid = "import-trace";
      a.href = base + "timeline/" + encodeURIComponent(j.trace);
      a.textContent = `open ${j.trace}`;
      li.append(" ", a);
    }
  };
  const follow = async (id) => {
    for (;;) {
      const j = await api("GET", `api/imports/${id}`);
      showJob(j);
      if (j.state === "done") return j;
      if (j.state === "failed") throw new Error(j.error);
      await new Promise((r) => setTimeout(r, 250));
    }
  };
  const send = (file) =>
    new Promise((resolve, reject) => {
      const key = "upload:" + file.name + ":" + Date.now();
      const li = row(key);
      const q = new URLSearchParams({ name: file.name });
      const step = snapshots.querySelector("[data-testid=snapshot-step]").value.trim();
      if (step) q.set("step", step);
      if (rules) { q.set("rules_id", rules.id); q.set("rules_name", rules.name); }
      const mem = snapshots.querySelector("[data-testid=snapshot-device-memory]").value.trim();
      if (mem) q.set("device_memory", mem);
      const xhr = new XMLHttpRequest();
      xhr.open("POST", `${base}api/snapshots?${q}`);
      const xsrf = document.cookie.split(";").map((c) => c.trim().split("=")).find(([k]) => k === "_xsrf");
      if (xsrf) xhr.setRequestHeader("X-XSRFToken", decodeURIComponent(xsrf.slice(1).join("=")));
      xhr.setRequestHeader("Content-Type", "application/octet-stream");
      xhr.upload.onprogress = (e) => show(li, file.name, "receiving", e.loaded, e.total || file.size, `uploading… ${bytes(e.loaded)} of ${bytes(file.size)}`);
      xhr.onerror = () => { show(li, file.name, "failed", 0, 0, "failed: the upload did not reach the server"); reject(new Error("upload failed")); };
      xhr.onload = () => {
        let j = null;
        try { j = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
        if (xhr.status !== 202 || !j) {
          const msg = j?.message || xhr.statusText || `HTTP ${xhr.status}`;
          show(li, file.name, "failed", 0, 0, `failed: ${msg}`);
          return reject(new Error(msg));
        }
        rows.delete(key);
        // A look at the list during the upload may have made the job a
        // row of its own: this one stands for it.
        const dup = rows.get(j.id);
        if (dup && dup !== li) dup.remove();
        rows.set(j.id, li);
        showJob(j);
        resolve(j);
      };
      xhr.send(file);
    });
  const open = async (files) => {
    let last = null;
    for (const f of files) {
      try {
        const j = await send(f);
        last = await follow(j.id);
      } catch { /* said on its row */ }
    }
    // One snapshot opened: its timeline, as linger open does.
    if (last && files.length === 1) location.href = base + "timeline/" + encodeURIComponent(last.trace);
  };
  snapshots.querySelector("[data-testid=snapshot-input]").addEventListener("change", (ev) => open(Array.from(ev.target.files)));
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault();
    drop.classList.remove("over");
    open(Array.from(ev.dataTransfer?.files || []));
  });
  // The imports under way (uploads from elsewhere, the watched directory),
  // followed while any runs.
  const poll = async () => {
    let running = false;
    try {
      for (const j of (await api("GET", "api/imports")).reverse()) {
        const on = j.state !== "done" && j.state !== "failed";
        running ||= on;
        if (on || rows.has(j.id)) showJob(j);
      }
    } catch { /* the next look */ }
    setTimeout(poll, running ? 500 : 3000);
  };
  poll();
}
