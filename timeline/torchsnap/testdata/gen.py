"""Writes torchsnap's test snapshots, shaped exactly as PyTorch's writer
shapes them (torch/csrc/cuda/Module.cpp, THCPModule_memorySnapshot, and
torch/csrc/profiler/combined_traceback.cpp's py_symbolize): a dict of
segments (with their blocks), device_traces (a list per device) and
allocator_settings; an oom entry has device_free in place of addr; one
list of frames per traceback, shared by the entries it caused, and one
dict per distinct frame, shared by the lists. Written as pickles of
protocols 2 to 5 (torch.cuda.memory._dump_snapshot uses pickle.dump),
as JSON (gzipped, as a large one travels), and a pickle gzipped; expected.json is the construction itself, which
the Go test compares with what it reads. Then a ring buffer that wrapped
(snap.wrapped.p4.pickle), and a training loop on two devices that leaks
a tensor per step, with expandable segments and an OOM
(snap.loop.p5.pickle); roundtrip.json is what PyTorch 1.13's reader
reports of each snapshot and of its round trip through Linger, worked out
from the construction (cmd/linger's TestRoundTrip). Run from this
directory:

    python3 gen.py
"""
import gzip
import json
import pickle

frame_cache = {}


def frame(filename, line, name):
    key = (filename, line, name)
    if key not in frame_cache:
        frame_cache[key] = {"filename": filename, "line": line, "name": name}
    return frame_cache[key]


def stack(*frames):
    return [frame(*f) for f in frames]


user = stack(("/home/u/model.py", 40, "forward"),
             ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1501, "_call_impl"),
             ("/home/u/train.py", 12, "step"))
mask = stack(("/home/u/model.py", 22, "build_mask"), ("/home/u/train.py", 12, "step"))
MB = 1 << 20
base = 0x7F0000000000
t0 = 1_733_000_000_000_000

trace0 = []
t = t0
trace0.append({"action": "segment_alloc", "addr": base, "size": 20 * MB, "stream": 0, "time_us": t, "frames": user})
for i in range(400):
    t += 10
    addr = base + (i % 10) * 2 * MB
    tb = user if i % 2 else mask  # one list per traceback, shared
    trace0.append({"action": "alloc", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
    t += 10
    trace0.append({"action": "free_requested", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
    trace0.append({"action": "free_completed", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
t += 10
trace0.append({"action": "alloc", "addr": base, "size": 2 * MB, "stream": 0, "time_us": t, "frames": user, "new_field": 7})
t += 10
trace0.append({"action": "oom", "device_free": 3 * MB, "size": 64 * MB, "stream": 0, "time_us": t, "frames": user})
t += 10
trace0.append({"action": "segment_map", "addr": base + 64 * MB, "size": 2 * MB, "stream": 0, "time_us": t, "frames": []})
t += 10
trace0.append({"action": "segment_unmap", "addr": base + 64 * MB, "size": 2 * MB, "stream": 0, "time_us": t, "frames": []})
t += 10
trace0.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": t, "frames": []})

base2 = 0x7E0000000000
trace2 = []
for i in range(50):
    trace2.append({"action": "alloc", "addr": base2 + i * 512, "size": 512, "stream": 7, "time_us": t0 + i, "frames": mask})

snapshot = {
    "segments": [
        {"device": 0, "address": base, "total_size": 20 * MB, "allocated_size": 2 * MB, "active_size": 2 * MB,
         "requested_size": 2 * MB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
         "is_expandable": False, "frames": user, "new_segment_field": "x",
         "blocks": [{"address": base, "size": 2 * MB, "requested_size": 2 * MB - 100, "state": "active_allocated", "frames": user},
                    {"address": base + 2 * MB, "size": 18 * MB, "requested_size": 0, "state": "inactive", "frames": []}]},
        # Its blocks tile it, as Module.cpp lists them: the 50 its trace
        # allocated, then the free rest.
        {"device": 2, "address": base2, "total_size": 2 * MB, "allocated_size": 50 * 512, "active_size": 50 * 512,
         "requested_size": 50 * 512, "stream": 7, "segment_type": "small", "segment_pool_id": (1, 3),
         "is_expandable": True, "frames": mask,
         "blocks": [{"address": base2 + i * 512, "size": 512, "requested_size": 512, "state": "active_allocated", "frames": mask}
                    for i in range(50)] +
                   [{"address": base2 + 50 * 512, "size": 2 * MB - 50 * 512, "requested_size": 0, "state": "inactive", "frames": []}]},
    ],
    "device_traces": [trace0, [], trace2],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                           "expandable_segments": True, "roundup_power2_divisions": {"1": 0}},
}

for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
    with open(f"snap.p{proto}.pickle", "wb") as f:
        pickle.dump(snapshot, f, protocol=proto)
# mtime=0: the same bytes each run.
with gzip.GzipFile("snap.p4.pickle.gz", "wb", mtime=0) as f:
    pickle.dump(snapshot, f, protocol=4)
with gzip.GzipFile("snap.json.gz", "wb", mtime=0) as f:
    f.write(json.dumps(snapshot).encode())

expected = {
    "segments": len(snapshot["segments"]),
    "devices": [0, 2],
    "entries": [len(trace0), len(trace2)],
    # Each entry as [action, addr (device_free for an oom), size,
    # time_us, stream, its frames as "file:line name" strings].
    "traces": [[[e["action"], e.get("addr", e.get("device_free")), e["size"], e["time_us"], e["stream"],
                 [f"{f['filename']}:{f['line']} {f['name']}" for f in e["frames"]]] for e in tr]
               for tr in (trace0, trace2)],
    "skipped": ["entry.new_field", "segments[].new_segment_field"],
}
with open("expected.json", "w") as f:
    json.dump(expected, f)

# A ring buffer that wrapped: _record_memory_history(max_entries=N) keeps
# the newest N entries. Dropping the first 30 of device 0's leaves its
# first entry the free_completed of the 10th block (allocated before the
# trace begins) and the segment at base never allocated in it: two things
# alive before the first entry.
wrapped = dict(snapshot)
wrapped["device_traces"] = [trace0[30:], [], trace2]
with open("snap.wrapped.p4.pickle", "wb") as f:
    pickle.dump(wrapped, f, protocol=4)

# A training loop on two devices, as _dump_snapshot writes it from
# Python 3.14 (protocol 5), recorded with Python frames only, so that the
# innermost frame of each stack is the user's line.
#
# Device 0 runs with expandable segments (PYTORCH_CUDA_ALLOC_CONF=
# expandable_segments:True): one range of address space, mapped in pages
# of 20 MiB (kLargeBuffer) as it fills, each map a segment_map entry.
# Weights fill the first page; each of 8 steps allocates a 20 MiB
# activation, keeps a 4 MiB tensor (losses.append(...): a leak per step)
# and frees the activation. empty_cache() then unmaps the page the
# activations used, which lies between pages still in use: at dump time
# the range is two mapped runs, and Module.cpp lists each as a segment.
# Last, an allocation of 80 GiB fails: an oom entry.
#
# Device 1 uses plain cudaMalloc segments: one of 20 MiB, a 2 MiB tensor
# kept per step.
py_module = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py"
weights_tb = stack((py_module, 1143, "_apply"), ("/home/u/train.py", 8, "<module>"))
act_tb = stack(("/home/u/model.py", 40, "forward"), (py_module, 1501, "_call_impl"),
               ("/home/u/train.py", 30, "train_step"), ("/home/u/train.py", 52, "<module>"))
leak_tb = stack(("/home/u/train.py", 33, "train_step"), ("/home/u/train.py", 52, "<module>"))
empty_tb = stack(("/usr/lib/python3/dist-packages/torch/cuda/memory.py", 133, "empty_cache"), ("/home/u/train.py", 55, "<module>"))
oom_tb = stack(("/home/u/train.py", 56, "<module>"),)
STEPS = 8
PAGE = 20 * MB
E = 0x7F2000000000
GiB = 1 << 30


def entry(action, addr, size, t, frames, stream=0):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": frames}
    if action == "oom":
        e["device_free"] = e.pop("addr")
    return e


loop0 = []
t = t0
loop0.append(entry("segment_map", E, PAGE, t, weights_tb))
loop0.append(entry("alloc", E, PAGE, t + 1, weights_tb))
t += 10
leak_at = E + 2 * PAGE  # the leaks fill pages 2 and 3
for i in range(STEPS):
    if i == 0:
        loop0.append(entry("segment_map", E + PAGE, PAGE, t, act_tb))
    loop0.append(entry("alloc", E + PAGE, PAGE, t + 1, act_tb))
    if i in (0, 5):  # the leak of step 0 starts page 2, that of step 5 page 3
        loop0.append(entry("segment_map", E + (2 if i == 0 else 3) * PAGE, PAGE, t + 2, leak_tb))
    loop0.append(entry("alloc", leak_at + i * 4 * MB, 4 * MB, t + 3, leak_tb))
    loop0.append(entry("free_requested", E + PAGE, PAGE, t + 4, act_tb))
    loop0.append(entry("free_completed", E + PAGE, PAGE, t + 4, act_tb))
    t += 10
loop0.append(entry("segment_unmap", E + PAGE, PAGE, t, empty_tb))
loop0.append(entry("oom", 3 * GiB, 80 * GiB, t + 10, oom_tb))


def blk(addr, size, state, frames):
    return {"address": addr, "size": size, "requested_size": size if state != "inactive" else 0, "state": state, "frames": frames}


def seg(device, addr, blocks, expandable, frames, stream=0):
    total = sum(b["size"] for b in blocks)
    a = addr
    for b in blocks:  # blocks tile their segment
        assert b["address"] == a
        a += b["size"]
    used = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": addr, "total_size": total, "allocated_size": used, "active_size": used,
            "requested_size": used, "stream": stream, "segment_type": "large", "segment_pool_id": (0, 0),
            "is_expandable": expandable, "frames": frames, "blocks": blocks}


B = 0x7F3000000000
loop1 = [entry("segment_alloc", B, PAGE, t0, leak_tb)]
for i in range(STEPS):
    loop1.append(entry("alloc", B + i * 2 * MB, 2 * MB, t0 + 1 + i, leak_tb))
loop = {
    "segments": [
        seg(0, E, [blk(E, PAGE, "active_allocated", weights_tb)], True, weights_tb),
        seg(0, leak_at, [blk(leak_at + i * 4 * MB, 4 * MB, "active_allocated", leak_tb) for i in range(STEPS)] +
            [blk(leak_at + STEPS * 4 * MB, 2 * PAGE - STEPS * 4 * MB, "inactive", [])], True, leak_tb),
        seg(1, B, [blk(B + i * 2 * MB, 2 * MB, "active_allocated", leak_tb) for i in range(STEPS)] +
            [blk(B + STEPS * 2 * MB, PAGE - STEPS * 2 * MB, "inactive", [])], False, leak_tb),
    ],
    "device_traces": [loop0, loop1],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                           "expandable_segments": True},
}
with open("snap.loop.p5.pickle", "wb") as f:
    pickle.dump(loop, f, protocol=5)

# roundtrip.json: what PyTorch 1.13's torch.cuda._memory_viz reports of
# each snapshot and of its round trip through Linger (trace import, then
# trace export --format memviz-pickle), worked out here from the
# construction; cmd/linger's TestRoundTrip compares it with what 1.13
# reports and with Linger's own reading.


def frame_fmt(f):  # 1.13's _frame_fmt
    return f"{f['filename'].split('/')[-1]}:{f['line']}:{f['name']}"


def stats(segments):  # 1.13's stats(), in bytes
    r = {"segments": len(segments), "total_size": 0}
    for s in segments:
        for b in s["blocks"]:
            r[b["state"]] = r.get(b["state"], 0) + b["size"]
            r["total_size"] += b["size"]
    return r


def folded(segments, history, stream=None, requested=None):
    """1.13's segments() lines: a block with history (Linger's export
    writes one per allocated block) names its stack, outermost first, and
    its requested bytes: requested[address] where given."""
    out = []
    for s in segments:
        prefix = f"stream_{s['stream'] if stream is None else stream};seg_{s['address']}"
        for b in s["blocks"]:
            if history and b["state"] == "active_allocated":
                fs = ";".join(frame_fmt(f) for f in reversed(b["frames"])) or "<non-python>"
                out.append(f"{prefix};{b['state']};{fs} {(requested or {}).get(b['address'], b['requested_size'])}")
            else:
                out.append(f"{prefix};{b['state']} {b['size']}")
    return out


def exported_trace(entries, segments):
    """The trace entries the export writes, by action ([count, bytes]);
    the allocated and reserved bytes over them, at their highest and at
    the end; and what was alive when allocated bytes first reached their
    highest, by the function of each block's innermost frame (what
    go tool pprof -top lists of a heap profile at the peak). What was alive before the first entry comes first, found
    as memory_viz's process_alloc_data finds it: a block freed that the
    trace never allocated, and the blocks and segments alive at the end
    that it never allocated either; a free is free_requested then
    free_completed; a snapshot entry is the export's own, last."""
    n = {}

    def add(action, size):
        c = n.setdefault(action, [0, 0])
        c[0] += 1
        c[1] += size

    def func(frames):
        return frames[0]["name"] if frames else ""

    # What was alive before the first entry.
    allocated, mapped, pre_reserved = set(), set(), 0
    alive = {}  # address: (bytes, function)
    for e in entries:
        a = e["action"]
        if a == "alloc":
            allocated.add(e["addr"])
        elif a in ("free_requested", "free_completed") and e["addr"] not in allocated:
            allocated.add(e["addr"])
            add("alloc", e["size"])
            alive[e["addr"]] = (e["size"], func(e["frames"]))
        elif a in ("segment_alloc", "segment_map"):
            mapped.add(e["addr"])
    for s in segments:
        if s["address"] not in mapped:
            add("segment_map" if s["is_expandable"] else "segment_alloc", s["total_size"])
            pre_reserved += s["total_size"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and b["address"] not in allocated:
                add("alloc", b["size"])
                alive[b["address"]] = (b["size"], func(b["frames"]))
    # The entries, and the figures after each.
    freeing = set()
    now = {"allocated": sum(v[0] for v in alive.values()), "reserved": pre_reserved}
    peak = dict(now)

    def by_function():
        out = {}
        for size, f in alive.values():
            out[f] = out.get(f, 0) + size
        return out

    at_peak = by_function()
    at_oom = []
    for e in entries:
        a = e["action"]
        if a == "alloc":
            alive[e["addr"]] = (e["size"], func(e["frames"]))
            now["allocated"] += e["size"]
            add("alloc", e["size"])
            if now["allocated"] > peak["allocated"]:
                at_peak = by_function()
        elif a in ("free_requested", "free_completed"):
            if a == "free_completed" and e["addr"] in freeing:
                freeing.discard(e["addr"])
                continue
            size = alive.pop(e["addr"], (e["size"], ""))[0]
            if a == "free_requested":
                freeing.add(e["addr"])
            now["allocated"] -= size
            add("free_requested", size)
            add("free_completed", size)
        elif a in ("segment_alloc", "segment_map"):
            now["reserved"] += e["size"]
            add(a, e["size"])
        elif a in ("segment_free", "segment_unmap"):
            now["reserved"] -= e["size"]
            add(a, e["size"])
        elif a == "oom":
            add(a, e["size"])
            at_oom.append(now["reserved"])
        for k in now:
            peak[k] = max(peak[k], now[k])
    add("snapshot", 0)
    return n, peak, now, at_peak, at_oom


def case(name, snap, device, index, protocol):
    segs = [s for s in snap["segments"] if s["device"] == device]
    live = stats(segs)
    trace, peak, end, at_peak, at_oom = exported_trace(snap["device_traces"][index], segs)
    assert end == {"allocated": live.get("active_allocated", 0), "reserved": live["total_size"]}, (name, end, live)
    return {
        "file": name,
        "device": device,
        "protocol": protocol,  # None: not a pickle, which 1.13 cannot read
        "original": {"stats": stats(snap["segments"]), "folded": folded(snap["segments"], False)},
        "export": {
            "stats": live,
            # A Linger trace keeps no stream; a block's requested bytes
            # are what its alloc entry recorded (PyTorch records the
            # request there), where the trace has it.
            "folded": folded(segs, True, stream=0, requested={e["addr"]: e["size"] for e in snap["device_traces"][index] if e["action"] == "alloc"}),
            "trace": trace,
            "peak": peak,
            "at_peak": at_peak,
            "device_free": [e["device_free"] for e in snap["device_traces"][index] if e["action"] == "oom"],
            # What the allocator had reserved at each oom: with the
            # card's memory, the device used then is that memory less
            # device_free, and what of it is not reserved is outside.
            "reserved_at_oom": at_oom,
        },
    }


cases = [case(f"snap.p{p}.pickle", snapshot, 0, 0, p) for p in range(2, pickle.HIGHEST_PROTOCOL + 1)]
cases += [case("snap.p4.pickle.gz", snapshot, 0, 0, None), case("snap.json.gz", snapshot, 0, 0, None),
          case("snap.wrapped.p4.pickle", wrapped, 0, 0, 4), case("snap.p4.pickle", snapshot, 2, 2, 4),
          case("snap.loop.p5.pickle", loop, 0, 0, 5), case("snap.loop.p5.pickle", loop, 1, 1, 5)]
with open("roundtrip.json", "w") as f:
    json.dump(cases, f, indent=1)
