"""Writes the snapshots of one data-parallel job's four ranks,
ranks/rank0.pickle ... rank3.pickle, shaped as gen.py shapes a snapshot
(as PyTorch's Module.cpp does), and ranks/expected.json, the figures of
each from the construction, which the tests of `linger open` and the
ranks page compare with what Linger reads.

Rank r ran on device r (torch.cuda.set_device(r)): its device_traces
list holds r empty lists before its own, as PyTorch's does. Each rank
loads its weights (kept to the end), then runs STEPS steps, each
allocating an activation it frees; rank r's activation is r * 512 bytes
larger than rank 0's (the noise of real ranks, far under the odd-rank
rule's bounds). Rank 2 also keeps LEAK_N blocks of LEAK_SIZE bytes every
step and never frees them, in 20 MiB segments of their own, as the large
pool makes them for requests under 10 MiB. Rank 1 records one oom that
the program caught. Run from this directory:

    python3 ranks.py
"""
import json
import os
import pickle

MB = 1 << 20
STEPS = 8
LEAK_N, LEAK_SIZE = 2, 2 * MB
WEIGHTS, ACTIVATION, JITTER = 8 * MB, 4 * MB, 512
SEGMENT = 20 * MB
LEAKY = 2

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


def rank_snapshot(r):
    base = 0x7F0000000000 + r * 0x10000000000
    t = [1_733_000_000_000_000 + r * 1000]
    trace, segments = [], []
    allocated = [0]
    figures = {"events": 0, "peak_bytes": 0, "ooms": 0}

    def entry(action, addr, size, frames):
        t[0] += 10
        # An oom's entry carries the device's free bytes in place of addr.
        e = {"action": action, "device_free" if action == "oom" else "addr": addr, "size": size, "stream": 0, "time_us": t[0], "frames": frames}
        trace.append(e)
        # An import makes one event of each entry but free_completed,
        # whose free_requested came first.
        if action != "free_completed":
            figures["events"] += 1
        if action == "alloc":
            allocated[0] += size
            figures["peak_bytes"] = max(figures["peak_bytes"], allocated[0])
        elif action == "free_requested":
            allocated[0] -= size

    entry("segment_alloc", base, SEGMENT, load)
    entry("alloc", base, WEIGHTS, load)
    leak_segs, leaked = [], []
    activation = ACTIVATION + r * JITTER
    for step in range(STEPS):
        entry("alloc", base + WEIGHTS, activation, forward)
        if r == LEAKY:
            for _ in range(LEAK_N):
                if len(leaked) % (SEGMENT // LEAK_SIZE) == 0:
                    seg = base + (1 + len(leak_segs)) * 0x100000000
                    leak_segs.append(seg)
                    entry("segment_alloc", seg, SEGMENT, keep)
                addr = leak_segs[-1] + (len(leaked) % (SEGMENT // LEAK_SIZE)) * LEAK_SIZE
                entry("alloc", addr, LEAK_SIZE, keep)
                leaked.append(addr)
        if r == 1 and step == 3:
            entry("oom", 3 * MB, 64 * MB, forward)
            figures["ooms"] += 1
        entry("free_requested", base + WEIGHTS, activation, forward)
        entry("free_completed", base + WEIGHTS, activation, forward)

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
    }
    figures.update({"name": f"rank{r}", "device": r, "end_bytes": allocated[0],
                    "leaked_bytes": len(leaked) * LEAK_SIZE})
    return snapshot, figures


os.makedirs("ranks", exist_ok=True)
expected = {"odd": [f"rank{LEAKY}"], "ranks": []}
for r in range(4):
    snap, fig = rank_snapshot(r)
    with open(f"ranks/rank{r}.pickle", "wb") as f:
        pickle.dump(snap, f, protocol=4)
    expected["ranks"].append(fig)
with open("ranks/expected.json", "w") as f:
    json.dump(expected, f, indent=1)
    f.write("\n")
