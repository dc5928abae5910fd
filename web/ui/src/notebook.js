// Entry of the notebook page (/notebooks/{path}).
import { Notebook } from "./notebook/notebook.js";
import { setFlameRenderer } from "./notebook/outputs.js";
import { renderFlame } from "./notebook/flame.js";

setFlameRenderer(renderFlame);

const nb = new Notebook(document.body);
window.linger = Object.assign(window.linger || {}, { notebook: nb });
nb.start().catch((e) => {
  nb.showBanner(`Could not open the notebook: ${e.message}`);
  console.error(e);
});
