"""Writes the snapshots of two data-parallel jobs of four ranks each,
shaped as gen.py shapes a snapshot (as PyTorch's Module.cpp does), with
steps as gen_steps.py records them, and the figures of each rank from
the construction, which the tests of `linger open` and the ranks page
compare with what Linger reads:

- ranks/rank0.pickle ... rank3.pickle and ranks/expected.json: rank 2
  keeps blocks every step from step LEAK_FROM on (a leak), and rank 1
  alone runs out of memory once (an OOM the program caught);
- ranks-alike/: four ranks alike, each of which runs out of memory once
  at the same step (a batch too large for every card): no rank is odd.

Rank r ran on device r (torch.cuda.set_device(r)): its device_traces
list holds r empty lists before its own, as PyTorch's does, and its
annotations carry device r. Each rank loads its weights (kept to the
end), then runs STEPS steps, each wrapped in
record_function("ProfilerStep#k") and recorded with the history
(external_annotations, START and END, as gen_steps.py writes them), each
allocating an activation it frees; rank r's activation is r * JITTER
bytes larger than rank 0's (the noise of real ranks, far under the
odd-rank rule's bounds). The leaky rank's blocks, LEAK_N of LEAK_SIZE
bytes a step, are never freed, in 20 MiB segments of their own, as the
large pool makes them for requests under 10 MiB. Run from this
directory:

    python3 ranks.py
"""
import json
import os
import pickle

MB = 1 << 20
STEPS = 12
LEAK_N, LEAK_SIZE, LEAK_FROM = 2, 2 * MB, 3
WEIGHTS, ACTIVATION, JITTER = 8 * MB, 4 * MB, 512
SEGMENT = 20 * MB
OOM_STEP = 3

frame_cache = {}


def frame(filename, line, name):
    key = (filename, line, name)
    if key not in frame_cache:
        frame_cache[key] = {"filename": filename, "line": line, "name": name}
    return frame_cache[key]


def stack(*frames):
    return [frame(*f) for f in frames]


load = stack(("/home/u/train.py", 30, "load_weights"), ("/home/u/train.py", 80, "main"))
forward = stack(("/home/u/model.py", 40, "forward"),
                ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1501, "_call_impl"),
                ("/home/u/train.py", 52, "step"))
keep = stack(("/home/u/train.py", 57, "remember"), ("/home/u/train.py", 52, "step"))


def rank_snapshot(r, leaky, oom):
    base = 0x7F0000000000 + r * 0x10000000000
    t = [1_733_000_000_000_000 + r * 1000]
    trace, segments, annotations = [], [], []
    allocated = [0]
    allocs = []  # [size, step it was allocated in (None: outside the steps), time freed]
    live = {}  # addr -> its entry in allocs
    figures = {"events": 0, "peak_bytes": 0, "ooms": 0}

    def tick():
        t[0] += 10
        return t[0]

    def entry(action, addr, size, frames, step=None):
        # An oom's entry carries the device's free bytes in place of addr.
        e = {"action": action, "device_free" if action == "oom" else "addr": addr, "size": size, "stream": 0, "time_us": tick(), "frames": frames}
        trace.append(e)
        # An import makes one event of each entry but free_completed,
        # whose free_requested came first.
        if action != "free_completed":
            figures["events"] += 1
        if action == "alloc":
            allocated[0] += size
            figures["peak_bytes"] = max(figures["peak_bytes"], allocated[0])
            live[addr] = [size, step, None]
            allocs.append(live[addr])
        elif action == "free_requested":
            allocated[0] -= size
            live.pop(addr)[2] = e["time_us"]

    def annotate(stage, k):
        # record_function's range: its START and END on the entries' clock.
        annotations.append({"stage": stage, "name": f"ProfilerStep#{k}", "device": r, "time_us": tick()})
        return annotations[-1]["time_us"]

    entry("segment_alloc", base, SEGMENT, load)
    entry("alloc", base, WEIGHTS, load)
    leak_segs, leaked = [], []
    activation = ACTIVATION + r * JITTER
    steps = []  # (START time, END time, allocated at its start, allocated at its end)
    for step in range(STEPS):
        start, at_start = annotate("START", step), allocated[0]
        entry("alloc", base + WEIGHTS, activation, forward, step)
        if leaky and step >= LEAK_FROM:
            for _ in range(LEAK_N):
                if len(leaked) % (SEGMENT // LEAK_SIZE) == 0:
                    seg = base + (1 + len(leak_segs)) * 0x100000000
                    leak_segs.append(seg)
                    entry("segment_alloc", seg, SEGMENT, keep, step)
                addr = leak_segs[-1] + (len(leaked) % (SEGMENT // LEAK_SIZE)) * LEAK_SIZE
                entry("alloc", addr, LEAK_SIZE, keep, step)
                leaked.append(addr)
        if oom and step == OOM_STEP:
            entry("oom", 3 * MB, 64 * MB, forward, step)
            figures["ooms"] += 1
        entry("free_requested", base + WEIGHTS, activation, forward, step)
        entry("free_completed", base + WEIGHTS, activation, forward, step)
        end = annotate("END", step)
        steps.append((start, end, at_start, allocated[0]))

    segments.append({"device": r, "address": base, "total_size": SEGMENT, "allocated_size": WEIGHTS, "active_size": WEIGHTS,
                     "requested_size": WEIGHTS, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                     "is_expandable": False, "frames": load,
                     "blocks": [{"address": base, "size": WEIGHTS, "requested_size": WEIGHTS, "state": "active_allocated", "frames": load},
                                {"address": base + WEIGHTS, "size": SEGMENT - WEIGHTS, "requested_size": 0, "state": "inactive", "frames": []}]})
    for seg in leak_segs:
        blocks = [{"address": a, "size": LEAK_SIZE, "requested_size": LEAK_SIZE, "state": "active_allocated", "frames": keep}
                  for a in leaked if seg <= a < seg + SEGMENT]
        used = len(blocks) * LEAK_SIZE
        if used < SEGMENT:
            blocks.append({"address": seg + used, "size": SEGMENT - used, "requested_size": 0, "state": "inactive", "frames": []})
        segments.append({"device": r, "address": seg, "total_size": SEGMENT, "allocated_size": used, "active_size": used,
                         "requested_size": used, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                         "is_expandable": False, "frames": keep, "blocks": blocks})
    snapshot = {
        "segments": segments,
        "device_traces": [[] for _ in range(r)] + [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False},
        "external_annotations": annotations,
    }
    # Each step is a scope: its beginning and its end are two events more.
    figures["events"] += 2 * STEPS
    # Lingering, by docs/pytorch.md's rule for a snapshot's steps: a block
    # a step allocated lingers if it is still alive when the step after
    # the next begins; what the last two steps leave is not judged.
    lingering = [a for a in allocs if a[1] is not None and a[1] + 2 < STEPS and (a[2] is None or a[2] > steps[a[1] + 2][0])]
    # Growth: the kept blocks' live bytes at each step's end, from the
    # step they first appear at, rise by the same bytes every step.
    kept = [LEAK_N * LEAK_SIZE * (k - LEAK_FROM + 1) for k in range(LEAK_FROM, STEPS)] if leaky else []
    rises = {b - a for a, b in zip(kept, kept[1:])}
    figures.update({
        "name": f"rank{r}", "device": r, "end_bytes": allocated[0],
        "leaked_bytes": len(leaked) * LEAK_SIZE,
        "lingering_bytes": sum(a[0] for a in lingering),
        "lingering_leaked_bytes": sum(a[0] for a in lingering if a[2] is None),
        "growth_per_step": rises.pop() if len(rises) == 1 else 0,
        # Step by step: allocated when the first step began, and at each
        # step's end.
        "steps_before": steps[0][2],
        "steps_allocated": [s[3] for s in steps],
    })
    if leaky:
        # It departs from the others at the step it first keeps blocks,
        # and keeps LEAK_N * LEAK_SIZE more than they do every step.
        figures["departs"] = {"step": LEAK_FROM, "last": STEPS - 1, "per_step": LEAK_N * LEAK_SIZE,
                              "excess": LEAK_N * LEAK_SIZE * (STEPS - LEAK_FROM)}
    return snapshot, figures


def job(folder, leaky, oom):
    """Writes one job's four ranks; leaky and oom say which ranks."""
    os.makedirs(folder, exist_ok=True)
    expected = {"odd": {}, "ranks": []}
    for r in range(4):
        snap, fig = rank_snapshot(r, r in leaky, r in oom)
        with open(f"{folder}/rank{r}.pickle", "wb") as f:
            pickle.dump(snap, f, protocol=4)
        expected["ranks"].append(fig)
    # The figures by which each rank is odd: the leaky one by its peak,
    # what lingers, what it holds at the end and step by step; one that
    # ran out of memory where most others did not, by its OOMs.
    for r in leaky:
        expected["odd"][f"rank{r}"] = ["peak", "lingering", "end", "steps"]
    if 2 * len(oom) < 4:
        for r in oom:
            expected["odd"].setdefault(f"rank{r}", []).append("ooms")
    with open(f"{folder}/expected.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


job("ranks", leaky=[2], oom=[1])
job("ranks-alike", leaky=[], oom=[0, 1, 2, 3])
