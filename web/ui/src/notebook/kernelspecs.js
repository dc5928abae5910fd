// Which kernel a notebook runs on, and what the page says about it: the
// DOM-free part of the kernel picker (node --test covers it).
//
// A spec here is {name, display_name, language}, the server's default
// first, as the toolbar's picker lists them; wanted is the notebook's
// metadata.kernelspec (or undefined).

/** The name of the spec to start: the one the notebook asks for when offered, else the default ("" without specs). */
export function startName(specs, wanted) {
  const name = wanted?.name;
  if (name && specs.some((s) => s.name === name)) return name;
  return specs[0]?.name || "";
}

/**
 * What the page says when the notebook runs on another kernel than the one
 * its metadata asks for (running is the name of the spec its session
 * runs), or "" when there is nothing to say.
 */
export function kernelNotice(specs, wanted, running) {
  const name = wanted?.name;
  if (!name || name === running) return "";
  const on = specs.find((s) => s.name === running);
  const onText = `"${on?.display_name || running}"`;
  if (!specs.some((s) => s.name === name)) {
    const hint = name === "linger-cuda" ? " (build it with make cuda)" : "";
    return `This notebook asks for kernel "${name}", which this server does not offer${hint}; running on ${onText}.`;
  }
  // Offered, but the notebook's session was already running another
  // (the kernel was changed in another tab and not saved).
  return `This notebook asks for kernel "${name}", but its session already runs ${onText}; pick the kernel in the toolbar to change it.`;
}

/** The notebook's metadata.kernelspec for a spec, as JupyterLab writes it. */
export function kernelspecMetadata(spec) {
  return { name: spec.name, display_name: spec.display_name, language: spec.language };
}
