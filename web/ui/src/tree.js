// Entry of the notebook browser (/ and /tree/{dir}): new notebook, new
// folder, rename, delete, upload and download through the contents API.
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
