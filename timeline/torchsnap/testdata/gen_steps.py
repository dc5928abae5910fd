"""Writes torchsnap's snapshots with steps, shaped as PyTorch's writer
shapes them (torch/csrc/cuda/Module.cpp, THCPModule_memorySnapshot; see
gen.py), and steps-expected.json: what each should be found to hold,
computed here from the construction, never from Linger's reading.

A decode loop as transformers' generate runs it, N steps, each wrapped in
record_function("ProfilerStep#k") and recorded with the history
(external_annotations, START and END):

    for k in range(N):
        with record_function(f"ProfilerStep#{k}"):
            logits = model(x)       # model.py: forward
        tok = sample(logits)        # generate.py: the previous step's
                                    # logits and token are dropped here

- steps.clean: the mask is built once, before the loop. Each step
  allocates an activation (freed in the step) and its logits, handed to
  the next step: dropped when the caller takes the next step's.
- steps.leak: the same, but the mask is rebuilt in every step (a
  duplicate), and forward keeps every step's hidden state in a list
  (self.history.append(h): a leak per step).
  Its entries are shaped as a current PyTorch writes them, with
  compile_context and user_metadata: forward's activations were
  allocated in a torch.compile region ("Torch-Compiled Region: 0/1",
  PyTorch's "N/A" elsewhere), and the user marked the kept hidden states
  with torch.cuda.memory._set_memory_metadata("history") (for the user's
  rules over them, TestEntryRules).
- steps.frames: steps.leak without annotations: its steps are the calls
  of forward (--step forward).

Run from this directory:

    python3 gen_steps.py
"""
import json
import pickle

N = 12
MB = 1 << 20
T0 = 1_733_100_000_000_000  # time_us of the first entry
BASE = 0x7F5000000000
SEG = 1 << 30

frame_cache = {}


def frame(filename, line, name):
    key = (filename, line, name)
    if key not in frame_cache:
        frame_cache[key] = {"filename": filename, "line": line, "name": name}
    return frame_cache[key]


TORCH = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py"
MODEL = "/home/u/model.py"
GEN = "/home/u/generate.py"
stacks = {}


def stack(kind):
    """One list per traceback, shared, as py_symbolize shares them."""
    if kind not in stacks:
        call = [frame(TORCH, 1501, "_call_impl"), frame(GEN, 20, "generate"), frame(GEN, 30, "<module>")]
        stacks[kind] = {
            "weights": [frame(TORCH, 820, "_apply"), frame(TORCH, 1160, "to"), frame(GEN, 8, "<module>")],
            "mask": [frame("/usr/lib/python3/dist-packages/transformers/modeling_attn_mask_utils.py", 300, "_prepare_4d_causal_attention_mask"),
                     frame(MODEL, 30, "forward")] + call,
            "act": [frame("/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", 114, "forward"), frame(MODEL, 41, "forward")] + call,
            "hidden": [frame(MODEL, 52, "forward")] + call,
            "logits": [frame(MODEL, 60, "forward")] + call,
            "token": [frame(GEN, 24, "generate"), frame(GEN, 30, "<module>")],
        }[kind]
    return stacks[kind]


def nbytes(shape, itemsize):
    n = itemsize
    for d in shape:
        n *= d
    return n


def block(n):
    """The caching allocator rounds a request up to 512 bytes."""
    return (n + 511) // 512 * 512


WEIGHT = block(nbytes((2048, 2048), 2))      # fp16: 8 MiB
MASK = block(nbytes((1, 1, 1024, 1024), 4))  # fp32: 4 MiB
ACT = block(nbytes((1, 1024, 4096), 2))      # fp16: 8 MiB
HIDDEN = block(nbytes((1, 1024, 2048), 2))   # fp16: 4 MiB
LOGITS = block(nbytes((1, 1, 32000), 4))     # fp32: 125 KiB
TOKEN = block(nbytes((1, 1), 8))             # int64: 512 B


COMPILED = "Torch-Compiled Region: 0/1"


def build(leak, annotate, modern=False):
    trace, annotations = [], []
    live = {}  # addr -> (size, kind, step)
    allocs = []  # (addr, size, kind, step, time, freed_time)
    state = {"t": T0, "next": BASE}

    def tick():
        state["t"] += 10
        return state["t"]

    def entry(action, addr, size, t, kind, context="N/A", metadata=""):
        """Module.cpp's order: action, addr, size, stream, time_us,
        compile_context and user_metadata (when this PyTorch has them),
        frames."""
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}
        if modern:
            e["compile_context"] = context
            e["user_metadata"] = metadata
        e["frames"] = stack(kind)
        return e

    def alloc(kind, size, step):
        addr = state["next"]
        state["next"] += size
        t = tick()
        context = COMPILED if kind == "act" else "N/A"
        metadata = "history" if kind == "hidden" else ""
        trace.append(entry("alloc", addr, size, t, kind, context, metadata))
        live[addr] = (size, kind, step)
        allocs.append({"addr": addr, "size": size, "kind": kind, "step": step, "time": t, "freed": None,
                       "compile_context": context if modern else "", "user_metadata": metadata if modern else ""})
        return addr

    def free(addr):
        size, kind, _ = live.pop(addr)
        t = tick()
        for e in ("free_requested", "free_completed"):
            trace.append(entry(e, addr, size, t, kind))
        for a in allocs:
            if a["addr"] == addr:
                a["freed"] = t

    trace.append({"action": "segment_alloc", "addr": BASE, "size": SEG, "stream": 0, "time_us": T0, "frames": stack("weights")})
    for _ in range(4):
        alloc("weights", WEIGHT, None)
    if not leak:
        alloc("mask", MASK, None)
    steps = []
    logits = token = None
    for k in range(N):
        start = tick()
        if annotate:
            annotations.append({"stage": "START", "name": f"ProfilerStep#{k}", "device": 0, "time_us": start})
        if leak:
            mask = alloc("mask", MASK, k)
        act = alloc("act", ACT, k)
        free(act)
        if leak:
            free(mask)
        prev, logits = logits, alloc("logits", LOGITS, k)
        if leak:
            alloc("hidden", HIDDEN, k)
        end = tick()
        if annotate:
            annotations.append({"stage": "END", "name": f"ProfilerStep#{k}", "device": 0, "time_us": end})
        steps.append((start, end))
        if prev is not None:
            free(prev)
        prev_token, token = token, alloc("token", TOKEN, None)
        if prev_token is not None:
            free(prev_token)

    # The segment at dump time: its live blocks in address order, and the
    # gaps between them as inactive blocks.
    blocks, at = [], BASE
    for addr in sorted(live):
        size, kind, _ = live[addr]
        if addr > at:
            blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive", "frames": []})
        blocks.append({"address": addr, "size": size, "requested_size": size, "state": "active_allocated", "frames": stack(kind)})
        at = addr + size
    if at < BASE + SEG:
        blocks.append({"address": at, "size": BASE + SEG - at, "requested_size": 0, "state": "inactive", "frames": []})
    allocated = sum(s for s, _, _ in live.values())
    snap = {
        "segments": [{"device": 0, "address": BASE, "total_size": SEG, "allocated_size": allocated, "active_size": allocated,
                      "requested_size": allocated, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                      "is_expandable": False, "frames": stack("weights"), "blocks": blocks}],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False},
    }
    if annotate:
        snap["external_annotations"] = annotations
    return snap, allocs, steps


def entry_rules(allocs, steps):
    """The bytes TestEntryRules's rules give each category, first match
    wins: (1) metadata "history" within ProfilerStep#1* (steps 1, 10 and
    11) is kv_cache; (2) metadata "hist*" is activation; (3) compile
    context "Torch-Compiled Region: */*" in a frame named forward is
    workspace; the rest as the built-in rules have it."""
    out = {}
    for a in allocs:
        k = a["step"]
        if a["user_metadata"] == "history" and k is not None and f"ProfilerStep#{k}".startswith("ProfilerStep#1"):
            c = "kv_cache"
        elif a["user_metadata"].startswith("hist"):
            c = "activation"
        elif a["compile_context"].startswith("Torch-Compiled Region: ") and "/" in a["compile_context"]:
            c = "workspace"
        else:
            c = {"weights": "weights", "mask": "attn_mask"}.get(a["kind"], "other")
        out[c] = out.get(c, 0) + a["size"]
    return out


def expected(allocs, steps):
    """The verdicts, from the construction and the rules of
    docs/pytorch.md: a block a step allocated (weights and KV caches
    aside) lingers if it is still alive when the step after the next
    begins; growth is the live bytes of a site at each step's end."""
    per_step = []
    end = max(a["time"] if a["freed"] is None else a["freed"] for a in allocs) + 1
    for k, (s, e) in enumerate(steps):
        mine = [a for a in allocs if a["step"] == k]
        per_step.append({
            "label": f"ProfilerStep#{k}",
            "allocated": sum(a["size"] for a in mine),
            "left_alive": sum(a["size"] for a in mine if a["freed"] is None or a["freed"] > e),
            "alive_at_end": sum(a["size"] for a in mine if a["freed"] is None),
        })
    lingering = []
    for a in allocs:
        k = a["step"]
        if k is None or a["kind"] == "weights" or k + 2 >= len(steps):
            continue
        judged = steps[k + 2][0]
        if a["freed"] is None or a["freed"] > judged:
            lingering.append(a)
    # Growth: the sites whose live bytes at the steps' ends rise by the
    # same bytes every step.
    growth = {}
    for kind in {a["kind"] for a in allocs}:
        at_ends = [sum(a["size"] for a in allocs if a["kind"] == kind and a["time"] <= e and (a["freed"] is None or a["freed"] > e)) for _, e in steps]
        d = [y - x for x, y in zip(at_ends, at_ends[1:])]
        if d and all(x == d[0] for x in d) and d[0] > 0:
            growth[kind] = d[0]
    masks = [a for a in allocs if a["kind"] == "mask" and a["step"] is not None]
    # The peak: allocated bytes at their highest.
    events = sorted([(a["time"], a["size"]) for a in allocs] + [(a["freed"], -a["size"]) for a in allocs if a["freed"] is not None])
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return {
        "steps": per_step,
        "lingering": {"count": len(lingering), "bytes": sum(a["size"] for a in lingering),
                      "leaked_bytes": sum(a["size"] for a in lingering if a["freed"] is None),
                      "sites": sorted({f"{a['kind']}" for a in lingering})},
        "growth_per_step": growth,
        "duplicate_masks": {"count": len(masks), "saved": sum(a["size"] for a in masks) - max([a["size"] for a in masks], default=0)},
        "peak": peak,
        "categories": {c: sum(a["size"] for a in allocs if {"weights": "weights", "mask": "attn_mask"}.get(a["kind"], "other") == c)
                       for c in ("weights", "attn_mask", "other")},
        "user_frame": {k: f"{stack(k)[0 if k != 'act' and k != 'mask' else 1]['filename']}:{stack(k)[0 if k != 'act' and k != 'mask' else 1]['line']}" for k in stacks},
    }


out = {}
for name, leak, annotate, proto in (("clean", False, True, 4), ("leak", True, True, 4), ("frames", True, False, 5)):
    snap, allocs, steps = build(leak, annotate, modern=name == "leak")
    with open(f"steps.{name}.p{proto}.pickle", "wb") as f:
        pickle.dump(snap, f, protocol=proto)
    out[name] = expected(allocs, steps)
    out[name]["file"] = f"steps.{name}.p{proto}.pickle"
    if name == "leak":
        out[name]["entry_rules"] = entry_rules(allocs, steps)
with open("steps-expected.json", "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
