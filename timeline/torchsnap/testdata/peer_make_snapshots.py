#!/usr/bin/env python3
"""Build realistic PyTorch CUDA memory snapshot dicts by hand (no GPU, no torch
needed) exactly in the shape torch's C++ writes them, and serialize them the
ways real files appear in the wild.

Shapes (see FORMAT.md for citations):
  modern   -- torch >= ~2.6 Python `_snapshot()` dict built in
              torch/csrc/cuda/Module.cpp THCPModule_memorySnapshot
  latest   -- modern + 2.14-era additions (host_segments/host_traces,
              trace 'pool_id', 'annotate' action) per torch/cuda/memory.py docstring
  v20      -- torch 2.0 shape: blocks carry 'history' [{addr, real_size, frames}],
              no block 'address'/'frames', no time_us, no segment_map/unmap
  v113     -- torch 1.13 `memory_snapshot()`: a bare LIST of segment dicts
  truncated-- modern, but the ring buffer (max_entries) dropped the oldest events:
              trace starts with frees of blocks allocated before the window.

Outputs (into the directory of this script, or argv[1]):
  modern.p2.pickle .. modern.p5.pickle   Python pickle protocols 2..5
  big.p2.pickle, big.p4.pickle, big.jit.pickle  large: LONG_BINGET/LONG_BINPUT, several FRAMEs, long strings
  modern.p4.pickle.gz                    gzip of protocol 4
  modern.json                            JSON variant (MemoryViz.js tries JSON first)
  modern.jit.pickle                      emulation of torch::jit::Pickler output
                                         (torch::cuda::_memory_snapshot_pickled(): PROTO 2,
                                         BINUNICODE only, BINPUT after containers, LONG1 8-byte)
  latest.p4.pickle, latest.p5.pickle
  v20.p4.pickle, v113.p2.pickle, v113.p4.pickle
  truncated.p4.pickle
  viz_padded.p4.pickle                   pickle + NUL padding to a multiple of 3, as
                                         _memory_viz._format_viz embeds it (trailing bytes after STOP)
  opcodes.txt                            opcodes each file uses (pickletools)
"""
import gzip
import io
import json
import os
import pickle
import pickletools
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

MiB = 1 << 20
KiB = 1 << 10
BASE0 = 0x7F3A_0000_0000  # typical CUDA VA (47 bits) -> LONG1 with 6 bytes in CPython
STREAM0 = 0  # default stream is written as int 0
STREAM1 = 0x55D4_1A2B_3C00  # a side stream: cudaStream_t pointer value cast to int64

# ---------------------------------------------------------------- frames
# Frame dicts are {"name", "filename", "line"} (py_symbolize / ivalue_symbolize).
# Identical tracebacks are deduplicated: the SAME list object is reused, so the
# pickler writes it once and then BINGET/LONG_BINGET back-references.


def frame(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


F_MAIN = frame("<module>", "/work/train.py", 88)
F_STEP = frame("train_step", "/work/train.py", 41)
F_FWD = frame("forward", "/work/model.py", 17)
F_LINEAR = frame("forward", "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", 125)
F_CPP = frame("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)",
              "??", 0)
F_ADAM = frame("step", "/usr/lib/python3/dist-packages/torch/optim/adam.py", 213)

TB_WEIGHT = [F_CPP, F_LINEAR, F_FWD, F_STEP, F_MAIN]  # shared list object
TB_ACT = [F_CPP, F_FWD, F_STEP, F_MAIN]
TB_OPT = [F_CPP, F_ADAM, F_STEP, F_MAIN]
EMPTY = []  # the C++ side reuses one empty list object for "no context"


def fx_frame():
    # augment_with_fx_traces=True adds these optional keys to frames
    f = frame("forward", "/tmp/torchinductor_root/ab/cab12.py", 33)
    f["fx_node_op"] = "call_function"
    f["fx_node_name"] = "addmm"
    f["fx_original_trace"] = '  File "/work/model.py", line 17, in forward\n    return self.lin(x)\n'
    return f


# ---------------------------------------------------------------- builders

def block(addr, size, requested, state, frames):
    # Module.cpp key order: address, size, requested_size, state, frames
    return {"address": addr, "size": size, "requested_size": requested, "state": state, "frames": frames}


def segment(device, addr, blocks, stream=STREAM0, pool=(0, 0), expandable=False, large=True, frames=EMPTY):
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    requested = sum(b["requested_size"] for b in blocks if b["state"] != "inactive")
    # check the blocks tile the segment contiguously
    a = addr
    for b in blocks:
        assert b["address"] == a, (hex(b["address"]), hex(a))
        a += b["size"]
    return {
        "device": device,
        "address": addr,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": active,
        "requested_size": requested,
        "stream": stream,
        "segment_type": "large" if large else "small",
        "segment_pool_id": tuple(pool),  # std::tuple<int64,int64> / MempoolId_t -> Python tuple
        "is_expandable": expandable,
        "blocks": blocks,
        "frames": frames,  # C++ appends "frames" last when context was recorded
    }


def te(action, addr, size, stream=STREAM0, t=0, frames=None, compile_context="N/A", user_metadata="", **extra):
    # Module.cpp order: action, addr|device_free, size, stream, time_us, compile_context, user_metadata, frames
    d = {"action": action}
    d["device_free" if action == "oom" else "addr"] = addr
    d["size"] = size
    d["stream"] = stream
    d["time_us"] = t
    d["compile_context"] = compile_context
    d["user_metadata"] = user_metadata
    d.update(extra)
    if frames is not None:
        d["frames"] = frames
    return d


def allocator_settings(expandable):
    return {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else "",
        "max_split_size": -1,  # int64_t(SIZE_MAX) when unset
        "garbage_collection_threshold": 0.0,
        "expandable_segments": expandable,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "graph_capture_record_stream_reuse": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}  # kRoundUpPowerOfTwoIntervals = 16 (keys "1","2",.. "32768"),
    }


def build_modern():
    T0 = 1_752_000_000_000_000  # time_us: microseconds since epoch (approx_time_t converted)
    d0 = BASE0
    # ---- device 0, segment A: regular cudaMalloc'd large segment, 20 MiB
    a = d0
    blocksA = [
        block(a, 8 * MiB, 8_000_000, "active_allocated", TB_WEIGHT),
        block(a + 8 * MiB, 4 * MiB, 4 * MiB, "inactive", EMPTY),
        block(a + 12 * MiB, 2 * MiB, 2 * MiB - 512, "active_pending_free", TB_ACT),
        block(a + 14 * MiB, 6 * MiB, 6 * MiB, "inactive", EMPTY),
    ]
    segA = segment(0, a, blocksA, frames=TB_WEIGHT)
    # ---- segment B: small pool (2 MiB), side stream
    b = d0 + 64 * MiB
    blocksB = [
        block(b, 512, 4, "active_allocated", TB_ACT),
        block(b + 512, 1536, 1000, "active_allocated", TB_ACT),
        block(b + 2048, 2 * MiB - 2048, 2 * MiB - 2048, "inactive", EMPTY),
    ]
    segB = segment(0, b, blocksB, stream=STREAM1, large=False, frames=TB_ACT)
    # ---- segment C: private pool of a CUDA graph (graph-created pool id (1, 0))
    c = d0 + 128 * MiB
    blocksC = [
        block(c, 2 * MiB, 2 * MiB, "active_allocated", TB_ACT),
        block(c + 2 * MiB, 2 * MiB, 2 * MiB, "inactive", EMPTY),  # free but reserved for the graph
    ]
    segC = segment(0, c, blocksC, pool=(1, 0), frames=TB_ACT)
    # ---- segment D: user MemPool (0, 1)
    dd = d0 + 192 * MiB
    segD = segment(0, dd, [block(dd, 2 * MiB, 1 * MiB, "active_allocated", TB_OPT)], pool=(0, 1), frames=TB_OPT)
    # ---- device 1 expandable segment: one VA range; mapped granules show as one segment
    e = BASE0 + (1 << 40)
    blocksE = [
        block(e, 20 * MiB, 20 * MiB, "active_allocated", TB_WEIGHT),
        block(e + 20 * MiB, 2 * MiB, 2 * MiB, "inactive", EMPTY),
    ]
    segE = segment(1, e, blocksE, expandable=True, frames=EMPTY)

    # ---- traces (device 0): the full history from an empty allocator
    tr0 = [
        te("segment_alloc", a, 20 * MiB, t=T0 + 1, frames=TB_WEIGHT),
        te("alloc", a, 8 * MiB, t=T0 + 2, frames=TB_WEIGHT, user_metadata="phase=init"),
        te("alloc", a + 8 * MiB, 4 * MiB, t=T0 + 3, frames=TB_ACT),
        te("free_requested", a + 8 * MiB, 4 * MiB, t=T0 + 4, frames=TB_ACT),
        te("free_completed", a + 8 * MiB, 4 * MiB, t=T0 + 5, frames=TB_ACT),
        te("alloc", a + 12 * MiB, 2 * MiB, t=T0 + 6, frames=TB_ACT),
        # record_stream'd block: free requested, not yet completed at dump time
        te("free_requested", a + 12 * MiB, 2 * MiB, t=T0 + 7, frames=TB_ACT),
        te("segment_alloc", b, 2 * MiB, stream=STREAM1, t=T0 + 8, frames=TB_ACT),
        te("alloc", b, 512, stream=STREAM1, t=T0 + 9, frames=TB_ACT, compile_context="Torch-Compiled Region: 0/0"),
        te("alloc", b + 512, 1536, stream=STREAM1, t=T0 + 10, frames=TB_ACT),
        te("segment_alloc", c, 4 * MiB, t=T0 + 11, frames=TB_ACT),
        te("alloc", c, 2 * MiB, t=T0 + 12, frames=TB_ACT),
        te("segment_alloc", dd, 2 * MiB, t=T0 + 13, frames=TB_OPT),
        te("alloc", dd, 2 * MiB, t=T0 + 14, frames=TB_OPT),
        # a transient segment that came and went
        te("segment_alloc", d0 + 256 * MiB, 40 * MiB, t=T0 + 15, frames=TB_ACT),
        te("alloc", d0 + 256 * MiB, 40 * MiB, t=T0 + 16, frames=TB_ACT),
        te("free_requested", d0 + 256 * MiB, 40 * MiB, t=T0 + 17, frames=TB_ACT),
        te("free_completed", d0 + 256 * MiB, 40 * MiB, t=T0 + 18, frames=TB_ACT),
        te("segment_free", d0 + 256 * MiB, 40 * MiB, t=T0 + 19, frames=TB_ACT),
        # OOM: 'device_free' replaces 'addr'; size = requested bytes
        te("oom", 512 * MiB, 80 * 1024 * MiB, t=T0 + 20, frames=TB_ACT),
        # snapshot marker written when _snapshot() is called with history on
        te("snapshot", 0, 0, t=T0 + 21),
    ]
    # ---- traces (device 1): expandable segments use segment_map / segment_unmap
    tr1 = [
        te("segment_map", e, 20 * MiB, t=T0 + 30, frames=TB_WEIGHT),
        te("alloc", e, 20 * MiB, t=T0 + 31, frames=TB_WEIGHT),
        te("segment_map", e + 20 * MiB, 4 * MiB, t=T0 + 32, frames=TB_ACT),  # grows the same range
        te("alloc", e + 20 * MiB, 2 * MiB, t=T0 + 33, frames=TB_ACT),
        te("free_requested", e + 20 * MiB, 2 * MiB, t=T0 + 34, frames=TB_ACT),
        te("free_completed", e + 20 * MiB, 2 * MiB, t=T0 + 35, frames=TB_ACT),
        te("segment_unmap", e + 22 * MiB, 2 * MiB, t=T0 + 36, frames=TB_ACT),  # shrink tail
    ]
    return {
        "segments": [segA, segB, segC, segD, segE],
        "device_traces": [tr0, tr1],
        "allocator_settings": allocator_settings(expandable=True),
        "external_annotations": [
            {"name": "## forward ##", "stage": "START", "device": 0, "time_us": T0 + 2},
            {"name": "## forward ##", "stage": "END", "device": 0, "time_us": T0 + 12},
        ],
    }


def build_latest():
    s = build_modern()
    T0 = 1_752_000_000_000_100
    # trace entries may carry the pool id (2.14-era docstring) and an 'annotate' action
    for tr in s["device_traces"]:
        for e in tr:
            e["pool_id"] = (0, 0)
    addr = s["segments"][0]["address"]
    s["device_traces"][0].append(te("annotate", addr, 8 * MiB, t=T0, frames=TB_STEP_LIST, user_metadata="packed for backward"))
    s["segments"][0]["blocks"][0]["frames"] = [fx_frame()] + TB_WEIGHT
    # pinned host memory (record_pinned_host_memory=True)
    s["host_segments"] = []
    s["host_traces"] = []
    return s


TB_STEP_LIST = [F_STEP, F_MAIN]


def build_v20():
    """torch 2.0 _snapshot(): blocks have 'history' instead of 'frames'/'address'."""
    a = BASE0
    def hblock(size, state, real_size=None, addr=None, frames=None):
        b = {"size": size, "requested_size": real_size if real_size is not None else size, "state": state}
        if addr is not None:
            h = {"addr": addr, "real_size": real_size}
            if frames is not None:
                h["frames"] = frames
            b["history"] = [h]
        return b
    blocks = [
        hblock(8 * MiB, "active_allocated", 8_000_000, a, TB_WEIGHT),
        hblock(12 * MiB, "inactive"),
    ]
    seg = {"device": 0, "address": a, "total_size": 20 * MiB, "allocated_size": 8 * MiB, "active_size": 8 * MiB,
           "requested_size": 8_000_000, "stream": 0, "segment_type": "large", "blocks": blocks}
    tr = [
        {"action": "segment_alloc", "addr": a, "size": 20 * MiB, "stream": 0, "frames": TB_WEIGHT},
        {"action": "alloc", "addr": a, "size": 8 * MiB, "stream": 0, "frames": TB_WEIGHT},
    ]
    return {"segments": [seg], "device_traces": [tr]}


def build_v113():
    """torch 1.13 torch.cuda.memory_snapshot(): a list of segments (no traces)."""
    a = BASE0
    return [
        {"device": 0, "address": a, "total_size": 20 * MiB, "allocated_size": 8 * MiB, "active_size": 8 * MiB,
         "stream": 0, "segment_type": "large",
         "blocks": [
             {"size": 8 * MiB, "state": "active_allocated",
              "history": [{"addr": a, "real_size": 8_000_000, "frames": TB_WEIGHT}]},
             {"size": 12 * MiB, "state": "inactive"},
         ]},
        {"device": 0, "address": a + 64 * MiB, "total_size": 2 * MiB, "allocated_size": 512, "active_size": 512,
         "stream": 0, "segment_type": "small",
         "blocks": [
             {"size": 512, "state": "active_allocated", "history": [{"addr": a + 64 * MiB, "real_size": 4, "frames": EMPTY}]},  # 1.13 _memory_viz reads h["frames"] unconditionally
             {"size": 2 * MiB - 512, "state": "inactive"},
         ]},
    ]


def build_truncated():
    """Ring buffer overflowed: the oldest entries (segment_alloc, allocs) are gone.
    The window starts with a free_requested/free_completed of a block allocated
    before it, and the segments at dump time still hold blocks never seen in it."""
    s = build_modern()
    tr0 = s["device_traces"][0]
    # drop the first 5 entries: segment_alloc(A), alloc(A+0), alloc(A+8M), free_requested(A+8M), free_completed(A+8M)
    # keep a free of something allocated before the window:
    a = s["segments"][0]["address"]
    kept = tr0[5:]
    pre = [te("free_requested", a + 8 * MiB, 4 * MiB, t=1, frames=TB_ACT),
           te("free_completed", a + 8 * MiB, 4 * MiB, t=2, frames=TB_ACT)]
    s["device_traces"][0] = pre + kept
    return s


def build_big(n=3000):
    """Many entries/tracebacks: > 256 memo slots (LONG_BINPUT/LONG_BINGET), > 64 KiB
    (several protocol-4 FRAMEs), a >= 256-byte string (BINUNICODE even in protocol 4),
    non-ASCII UTF-8 user_metadata, negative ints (BININT) and stream pointers (LONG1)."""
    T0 = 1_752_000_000_000_000
    long_name = "/very/long/" + "x" * 300 + "/module.py"
    s = build_modern()
    tr = s["device_traces"][0]
    base = BASE0 + 512 * MiB
    for i in range(n):
        tb = [frame(f"layer_{i % 97}", long_name if i == 0 else f"/work/layers/l{i % 97}.py", i % 500), F_STEP, F_MAIN]
        addr = base + i * 4 * KiB
        tr.append(te("alloc", addr, 4096, t=T0 + 100 + 2 * i, frames=tb, user_metadata="étape=前向" if i % 500 == 0 else ""))
        tr.append(te("free_requested", addr, 4096, t=T0 + 101 + 2 * i, frames=tb))
        tr.append(te("free_completed", addr, 4096, t=T0 + 101 + 2 * i, frames=tb))
    s["allocator_settings"]["max_split_size"] = -1
    return s


# ---------------------------------------------------------------- torch::jit::Pickler emulation
class JitPickler:
    """Byte-for-byte emulation of torch/csrc/jit/serialization/pickler.cpp as used by
    torch::cuda::_memory_snapshot_pickled() (tag_aggregates=false):
      PROTO 2; dict: EMPTY_DICT MARK k v ... SETITEMS (MARK/SETITEMS even when empty);
      list: EMPTY_LIST MARK ... APPENDS; strings: BINUNICODE, memoized by VALUE
      (BINPUT after first, BINGET after); ints: BININT1 [0,255], BININT2 [0,65535],
      BININT int32, else LONG1 with 8 bytes; bool NEWTRUE/NEWFALSE; double BINFLOAT;
      tuple of 2: TUPLE2; containers used more than once are memoized by pointer with a
      BINPUT written AFTER the whole container (SETITEMS/APPENDS)."""

    def __init__(self, shared_ids):
        self.b = bytearray()
        self.memo_id = 0
        self.strings = {}
        self.ptrs = {}
        self.shared = shared_ids  # id()s of containers referenced more than once

    def put(self):
        if self.memo_id <= 255:
            self.b += b"q" + bytes([self.memo_id])
        else:
            self.b += b"r" + struct.pack("<I", self.memo_id)
        self.memo_id += 1
        return self.memo_id - 1

    def get(self, i):
        self.b += (b"h" + bytes([i])) if i <= 255 else (b"j" + struct.pack("<I", i))

    def push(self, v):
        if isinstance(v, (dict, list)) and id(v) in self.shared:
            if id(v) in self.ptrs:
                self.get(self.ptrs[id(v)])
                return
            self.impl(v)
            self.ptrs[id(v)] = self.put()
        else:
            self.impl(v)

    def impl(self, v):
        if isinstance(v, bool):
            self.b += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            if 0 <= v <= 255:
                self.b += b"K" + bytes([v])
            elif 0 <= v <= 65535:
                self.b += b"M" + struct.pack("<H", v)
            elif -2**31 <= v < 2**31:
                self.b += b"J" + struct.pack("<i", v)
            else:
                self.b += b"\x8a\x08" + struct.pack("<q", v)
        elif isinstance(v, float):
            self.b += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            if v in self.strings:
                self.get(self.strings[v])
            else:
                e = v.encode("utf-8")
                self.b += b"X" + struct.pack("<I", len(e)) + e
                self.strings[v] = self.put()
        elif v is None:
            self.b += b"N"
        elif isinstance(v, tuple):
            assert len(v) == 2
            self.push(v[0]); self.push(v[1]); self.b += b"\x86"
        elif isinstance(v, dict):
            self.b += b"}("
            for k, x in v.items():
                self.push(k); self.push(x)
            self.b += b"u"
        elif isinstance(v, list):
            self.b += b"]("
            for x in v:
                self.push(x)
            self.b += b"e"
        else:
            raise TypeError(type(v))

    def dumps(self, v):
        self.b += b"\x80\x02"
        self.push(v)
        self.b += b"."
        return bytes(self.b)


def shared_container_ids(obj):
    seen, shared = set(), set()
    def walk(v):
        if isinstance(v, (dict, list)):
            if id(v) in seen:
                shared.add(id(v)); return
            seen.add(id(v))
            for x in (v.values() if isinstance(v, dict) else v):
                walk(x)
        elif isinstance(v, tuple):
            for x in v:
                walk(x)
    walk(obj)
    return shared


def jit_dumps(obj):
    # strip keys the C++-only pickled path does not write (user_metadata, forward_frames,
    # graph_capture_record_stream_reuse are Python-path only in the versions read)
    return JitPickler(shared_container_ids(obj)).dumps(obj)


# ---------------------------------------------------------------- JSON
def to_jsonable(o):
    if isinstance(o, dict):
        return {k: to_jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [to_jsonable(v) for v in o]
    return o


def opcodes_of(data):
    ops = {}
    for op, arg, pos in pickletools.genops(data):
        ops[op.name] = ops.get(op.name, 0) + 1
    return ops


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    modern = build_modern()
    for p in (2, 3, 4, 5):
        files[f"modern.p{p}.pickle"] = pickle.dumps(modern, protocol=p)
    files["modern.p4.pickle.gz"] = gzip.compress(files["modern.p4.pickle"])
    files["modern.json"] = json.dumps(to_jsonable(modern)).encode()
    files["modern.jit.pickle"] = jit_dumps(modern)
    latest = build_latest()
    files["latest.p4.pickle"] = pickle.dumps(latest, protocol=4)
    files["latest.p5.pickle"] = pickle.dumps(latest, protocol=5)
    files["v20.p4.pickle"] = pickle.dumps(build_v20(), protocol=4)
    v113 = build_v113()
    files["v113.p2.pickle"] = pickle.dumps(v113, protocol=2)
    files["v113.p4.pickle"] = pickle.dumps(v113, protocol=4)
    files["truncated.p4.pickle"] = pickle.dumps(build_truncated(), protocol=4)
    buf = pickle.dumps(modern, protocol=4)
    buf += b"\x00" * (3 - len(buf) % 3)  # exactly what _memory_viz._format_viz does
    files["viz_padded.p4.pickle"] = buf

    big = build_big()
    files["big.p2.pickle"] = pickle.dumps(big, protocol=2)
    files["big.p4.pickle"] = pickle.dumps(big, protocol=4)
    files["big.jit.pickle"] = jit_dumps(big)

    report = io.StringIO()
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        raw = gzip.decompress(data) if name.endswith(".gz") else data
        if name.endswith(".json"):
            report.write(f"{name}: {len(data)} bytes (JSON)\n")
            continue
        # pickletools stops at STOP; trailing NULs of viz_padded are ignored by pickle.loads too
        ops = opcodes_of(raw)
        report.write(f"{name}: {len(data)} bytes, PROTO {raw[1]}\n  " +
                     " ".join(f"{k}={v}" for k, v in sorted(ops.items())) + "\n")
        # round-trip
        back = pickle.loads(raw)
        assert back is not None
    with open(os.path.join(OUT, "opcodes.txt"), "w") as f:
        f.write(report.getvalue())
    print(report.getvalue())
    # round-trip equality checks (tuples come back as tuples from pickle, lists from JSON)
    assert pickle.loads(files["modern.p4.pickle"]) == modern
    assert pickle.loads(files["modern.jit.pickle"]) == modern
    assert pickle.loads(files["viz_padded.p4.pickle"]) == modern
    print("round-trips OK")


if __name__ == "__main__":
    main()
