"""attend against FlashMLA in one process, on the same tokens, every timed output checked
(BENCHMARKS.md; issues 34, 35 and 47).

Data: random latents with log-normal per-token magnitudes (sigma 0.5) in every record a call can
read, RoPE included: a cache of 4 M tokens written twice, as 368-byte per-token records (the plugin's
writer) and as 656-byte fp8_ds_mla records (FlashMLA's rule: power-of-two tile scales,
docs/record-format.md); top-k 2048 random slots per query.

Rounds. Everything below is measured --rounds times (5), one pass over all of it a round (the sides
interleaved inside it), the rounds --round-gap seconds apart (40: five rounds spread over about 3
minutes, so that a slow or fast minute of either side shows as a move between rounds instead of
passing for the figure). A time is the median over the rounds of each round's median (over --reps
interleaved repetitions); its spread, the range of the rounds' medians; a ratio, the median of the
rounds' ratios, with their range. The run reports; it vetoes nothing (issue 57): a cell (a grid cell
in one mode, a batch-128 row, a prefill row timed one way) where either side's time moved by more
than --max-drift (3%) between rounds (from 5 rounds on, between the rounds left when the fastest and
slowest are set aside: drift()) is marked "drifted" in the JSON and the tables and left out of every
claim by itself; the headline ranges and counts come from the cells kept, and the JSON's "headline"
says how many cells the run kept and which it dropped. Fewer than 3 rounds make no headline (exit 2).
Cost: set-up and six passes (one unrecorded) take about 25 s on the H200; with four gaps of 40 s the
whole run is about 3 minutes of GPU wall time (--round-gap 0: about 25 s; --quick: about 15 s + gaps).

1. Decode grid, as an engine replays it: each side's call captured --calls times in one CUDA graph on
   a side stream and replayed between CUDA events (GPU time a call). Batch 1, 2, 4, 8, 16, 32, 64, 128
   x h 16, 32, 64, 128, and two queries a sequence (MTP, FlashMLA's s_q = 2; attend takes the 2b
   queries) for batch 1-32. FlashMLA: sparse_decode_fwd on the 656 bytes (its metadata computed before
   capture, as vLLM does; h < 64 padded to 64, printed); attend on the 368 bytes. Two modes:
     back_to_back  the calls follow each other: a call may start during the previous call's tail
                   (programmatic dependent launch), which a model's step does not give it;
     after_gemm    an ordinary kernel before every call on both sides (a bf16 GEMM [128, 7168] x
                   [7168, 1536], a decode layer's projection), its own time (a graph of the GEMMs
                   alone, same round) subtracted: a call as it runs inside a model.
   (--flush-l2 adds after_flush: a 256 MB write before every call, its time subtracted.)
2. Batch 128, back-to-back eager launches: FlashMLA, attend on the same 656 bytes, attend on the 368.
3. Prefill, 4096 query tokens, top-k 2048 over a 2 M-token context: FlashMLA's bf16 prefill over the
   records gathered to bf16, attend on the 368 records, gather + that prefill; timed alone (each
   side's blocks of 3 launches in a row) and interleaved (the sides' blocks alternating).

Checks, of every query of every timed output, lse included (bench/attend_reference.py): a float32
attention over the same records, judged row by row with the GPU tests' bounds
(host_shims/common/attend_check.h: relative RMS 1/128; each element 2/128 of itself + 1/128 of the
row's largest |value|; lse 1e-5 relative). attend on 368 records against those records through the
plugin's gather, upcast; attend on 656 and FlashMLA's decode against the 656 records decoded;
FlashMLA's prefill against the gathered records it reads. Outputs are filled with NaN before each
timed block or replay, so a check reads what the timed calls wrote (FlashMLA's prefill and its eager
lse are allocated by the call: those are checked as returned). A failed check: exit 1.

Usage (GPU machine; FlashMLA from tools/flashmla-fetch (into .anchor/) or an installed vLLM):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/flashmla_compare.py [--flashmla .anchor/_flashmla_C.abi3.so] [--json out.json] [--quick]
The run prints its time and keeps it in the JSON ("seconds"); the full run was planned to take a few
minutes on the H200 (well under 7), --quick about a minute.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

import nvfp4_mla
from nvfp4_mla import _abi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attend_reference as ref  # noqa: E402  (bench/, beside this file)
import provenance  # noqa: E402

D, DV, TOPK = ref.D, ref.DV, 2048
# "cuda"; tests/check_bench_scripts.py runs the whole script on the CPU backend with "cpu", small
# shapes and a stand-in FlashMLA (its timings are then wall-clock and mean nothing).
DEVICE = "cuda"
GEMM = (128, 7168, 1536)  # the ordinary kernel of after_gemm: [m, k] x [k, n] bf16
L368 = dict(layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN)
L656 = dict(layout=_abi.LAYOUT_FP8_DS_MLA_656, scale_mode=_abi.SCALE_STATIC)
LN2 = math.log(2.0)


def load_flashmla(path):
    if path:
        torch.ops.load_library(path)
    else:
        import vllm._flashmla_C  # noqa: F401  (registers torch.ops._flashmla_C)
    return torch.ops._flashmla_C


# ---- timing and rounds (pure functions: tests/check_bench_scripts.py runs them on the CPU) ----

def summarize(values):
    """A figure over rounds: the median of the rounds' values, their range, the values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": list(values)}


def ratio_summary(peer, ours):
    """The peer's time over ours, round by round, summarized."""
    return summarize([p / o for p, o in zip(peer, ours)])


MAX_DRIFT = 0.03  # a side's largest move between rounds in a kept cell (main sets it from --max-drift)


def drift(values):
    """How far a side's round medians moved: (max - min) / min; from 5 rounds on, over the rounds left
    when the fastest and the slowest are set aside (one round apart from all others, a clock step or a
    neighbour's burst, then moves the spread printed beside it but not the verdict; the headline's
    figure, the median, is the middle round either way)."""
    if len(values) < 2:
        return 0.0
    kept = sorted(values)[1:-1] if len(values) >= 5 else list(values)
    return (max(kept) - min(kept)) / min(kept)


def stability(peer, ours, max_drift=None):
    """A cell's drifts (each side's, drift()) and whether it is kept: neither side moved by more than
    max_drift (MAX_DRIFT) between rounds."""
    limit = MAX_DRIFT if max_drift is None else max_drift
    p, o = drift(peer), drift(ours)
    return {"peer_drift": p, "attend_drift": o, "kept": p <= limit and o <= limit}


def headline(cells, rounds, max_drift):
    """cells: (where, FlashMLA's drift, attend's drift) of every cell a claim can use. The run's
    report: how many cells it kept (neither side moved by more than max_drift between rounds), the
    ones it dropped and why; refused only when fewer than 3 rounds ran (no drift to judge)."""
    dropped = [{"where": w, "peer_drift": p, "attend_drift": a} for w, p, a in cells if p > max_drift or a > max_drift]
    report = {"refused": rounds < 3, "max_drift": max_drift, "cells": len(cells), "kept": len(cells) - len(dropped),
              "dropped": dropped}
    if rounds < 3:
        report["reason"] = f"{rounds} round(s): a headline needs at least 3"
    kept = [c for c in cells if c[1] <= max_drift and c[2] <= max_drift]
    if kept:
        worst = max(kept, key=lambda c: max(c[1], c[2]))
        report.update(worst_kept_drift=max(worst[1], worst[2]), where=worst[0])
    return report


def interleaved(fns, reps, warmup=2):
    """Samples of each fn (microseconds a call), `reps` each, the fns alternating."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return samples


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def current_stream():
    return torch.cuda.current_stream() if DEVICE == "cuda" else None


def event_us(body, calls):
    """us a call of `calls` calls made by body(), between CUDA events (wall clock on the CPU)."""
    if DEVICE != "cuda":
        start = time.perf_counter()
        body()
        return (time.perf_counter() - start) * 1e6 / calls
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    body()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def launches_us(fn, launches, poison=None):
    """A timer: us per call of `launches` back-to-back calls of fn between events, the outputs
    poisoned (outside the events) first."""
    def timed():
        if poison:
            poison()
        return event_us(lambda: [fn() for _ in range(launches)], launches)
    return timed


class Graph:
    """`calls` captures of fn (each after before(), when given) in one CUDA graph on a side stream;
    `result` is what the last captured fn returned (its outputs live in the graph's memory). On the
    CPU (DEVICE) a replay calls them again."""

    def __init__(self, fn, calls, side, before=None):
        self.fn, self.calls, self.before = fn, calls, before
        if DEVICE != "cuda":
            self.result = self.body()
            return
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g, stream=side):
            self.result = self.body()

    def body(self):
        result = None
        for _ in range(self.calls):
            if self.before:
                self.before()
            result = self.fn()
        return result

    def replay(self):
        if DEVICE == "cuda":
            self.g.replay()  # rewrites `result`'s memory
        else:
            self.result = self.body()

    def time(self):
        return event_us(self.replay, self.calls)


def nan_(*tensors):
    for t in tensors:
        if t is not None:
            t.fill_(float("nan"))


def make_tokens(n, gen, fn, chunk=1 << 20):
    """Calls fn(first, x) for chunks of n random tokens x [chunk, 576] bf16 (norms vary per token)."""
    for first in range(0, n, chunk):
        m = min(chunk, n - first)
        x = torch.randn(m, D, device=DEVICE, generator=gen)
        x *= torch.exp(0.5 * torch.randn(m, 1, device=DEVICE, generator=gen))
        fn(first, x.to(torch.bfloat16))


def peer_lse_check(out, lse, want, want_lse):
    """A FlashMLA output's check; its lse is taken as natural log (FlashMLA's tests/ref.py), and if
    only that fails while it matches in base 2, as base 2 (said in the result)."""
    c = ref.row_check(out, lse, want, want_lse)
    if c["check"] == "FAIL" and ref.row_check(out, None, want, None)["check"] == "PASS":
        c2 = ref.row_check(out, lse * LN2, want, want_lse)
        if c2["check"] == "PASS":
            c2["lse_base"] = 2
            return c2
    return c


class Bench:
    """The caches, the plugin's gather of the 368 records (the reference's keys), the ordinary kernels."""

    def __init__(self, fm, ctx, args):
        self.fm, self.ctx, self.args = fm, ctx, args
        self.sm = 1.0 / math.sqrt(D)
        n = args.tokens
        self.n = n
        self.gen = torch.Generator(device=DEVICE).manual_seed(34)
        self.c656 = torch.empty(n // 64, 64, 656, dtype=torch.uint8, device=DEVICE)
        self.c368 = torch.empty(n // 64, 64, 368, dtype=torch.uint8, device=DEVICE)
        flat656 = self.c656.view(n, 656)

        def fill(first, x):
            flat656[first:first + x.shape[0]] = ref.fp8_ds_mla_records(x)
            slots = torch.arange(first, first + x.shape[0], device=DEVICE, dtype=torch.int64)
            ctx.write(x[:, :DV], x[:, DV:], slots, self.c368, **L368)

        make_tokens(n, self.gen, fill)
        # The 368 records through the plugin's gather (bf16): the keys of the 368 reference and of
        # FlashMLA's prefill.
        self.dense = torch.empty(n, 1, D, dtype=torch.bfloat16, device=DEVICE)
        ctx.gather(self.c368, torch.arange(n, device=DEVICE, dtype=torch.int32), self.dense.view(n, D), **L368)
        self.side = torch.cuda.Stream() if DEVICE == "cuda" else None
        a = torch.randn(GEMM[0], GEMM[1], device=DEVICE, dtype=torch.bfloat16)
        w = torch.randn(GEMM[1], GEMM[2], device=DEVICE, dtype=torch.bfloat16) * 0.01
        c = torch.empty(GEMM[0], GEMM[2], device=DEVICE, dtype=torch.bfloat16)
        flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE) if args.flush_l2 else None
        self.gaps = {"back_to_back": None, "after_gemm": lambda: torch.matmul(a, w, out=c)}
        if flush is not None:
            self.gaps["after_flush"] = lambda: flush.fill_(1)
        self.peer_out_ok = None  # whether FlashMLA's decode writes into the out it is given
        sync()

    def warm(self, seconds=0.5):
        """The GPU busy for a moment after an idle gap between rounds (its clocks back up before the
        next round's first cell): the after_gemm mode's GEMM, again and again."""
        end = time.time() + seconds
        while time.time() < end:
            for _ in range(20):
                self.gaps["after_gemm"]()
            sync()

    def keys368(self, ix):
        return ref.decode_368(self.c368.view(self.n, 368)[ix.reshape(-1)]).view(*ix.shape, D)

    def keys_dense(self, ix):
        return self.dense.view(self.n, D)[ix.reshape(-1)].float().view(*ix.shape, D)

    def decode_matches_gather(self, chunk=1 << 18):
        """The reference's decode of the 368 records against the plugin's gather, every record."""
        flat = self.c368.view(self.n, 368)
        return all(ref.matches_gather(flat[s:s + chunk], self.dense.view(self.n, D)[s:s + chunk])
                   for s in range(0, self.n, chunk))

    def keys656(self, ix):
        return ref.decode_656(self.c656.view(self.n, 656)[ix.reshape(-1)]).view(*ix.shape, D)

    def ref368(self, q, ix):
        return ref.reference(q, ix, self.keys368, self.sm)

    def ref656(self, q, ix):
        return ref.reference(q, ix, self.keys656, self.sm)

    def ref_dense(self, q, ix):
        return ref.reference(q, ix, self.keys_dense, self.sm)

    def flash_decode(self, q, idx, meta, out):
        """FlashMLA's decode into `out` (when it takes one: the first call, outside any capture, finds
        out): (out [b, s_q, hq, 512], lse [b, hq, s_q])."""
        kv = self.c656.view(torch.float8_e4m3fn).unsqueeze(2)

        def call(o):
            return self.fm.sparse_decode_fwd(q, kv, idx, None, None, meta.get("m"), meta.get("n"), None, None, None,
                                             DV, self.sm, o, False)

        if self.peer_out_ok is None:
            try:
                res = call(out)
                self.peer_out_ok = res[0].data_ptr() == out.data_ptr()
            except RuntimeError as exc:
                print(f"note: FlashMLA's decode refused an out tensor ({str(exc).splitlines()[0]})")
                self.peer_out_ok, res = False, call(None)
            if not self.peer_out_ok:
                print("note: FlashMLA's decode allocates its out: its outputs are checked as returned, not poisoned "
                      "before each call")
        else:
            res = call(out if self.peer_out_ok else None)
        meta["m"], meta["n"] = res[2], res[3]
        return res[0], res[1]

    def queries(self, b, sq, h):
        """Queries [b, s_q, hq, 576] (heads past h zero, FlashMLA's padding) and top-k [b, s_q, 2048]."""
        hq = max(h, 64)
        q = torch.randn(b, sq, hq, D, device=DEVICE, generator=self.gen).to(torch.bfloat16)
        q[:, :, h:] = 0
        idx = torch.randint(0, self.n, (b, sq, TOPK), device=DEVICE, generator=self.gen, dtype=torch.int32)
        return q, idx


def peer_view(out, lse, h):
    """FlashMLA's decode outputs as [n_q, h, 512] and [n_q, h] (its lse is [b, hq, s_q])."""
    b, sq = out.shape[0], out.shape[1]
    return out[:, :, :h].reshape(b * sq, h, DV), lse[:, :h, :].transpose(1, 2).reshape(b * sq, h)


class GridCell:
    """One (batch, s_q, h) of the decode grid: both sides' graphs in every mode, their round medians."""

    def __init__(self, bench, b, sq, h):
        self.bench, self.b, self.sq, self.h = bench, b, sq, h
        self.q, self.idx = bench.queries(b, sq, h)
        nq = b * sq
        self.qh = self.q[:, :, :h].reshape(nq, h, D).contiguous()
        self.ix = self.idx.view(nq, TOPK)
        self.out = torch.empty(nq, h, DV, dtype=torch.bfloat16, device=DEVICE)
        self.lse = torch.empty(nq, h, dtype=torch.float32, device=DEVICE)
        self.peer_out = torch.empty(b, sq, self.q.shape[2], DV, dtype=torch.bfloat16, device=DEVICE)
        meta = {}
        bench.flash_decode(self.q, self.idx, meta, self.peer_out)  # metadata before capture, as vLLM does
        attend = bench.ctx.prepare_attend(self.qh, self.ix, bench.c368, self.out, lse=self.lse, sm_scale=bench.sm,
                                          stream=bench.side, **L368).run
        calls, side = bench.args.calls, bench.side
        self.graphs, self.times = {}, {}
        for mode, gap in bench.gaps.items():
            g = {"flashmla": Graph(lambda: bench.flash_decode(self.q, self.idx, meta, self.peer_out), calls, side, gap),
                 "attend368": Graph(attend, calls, side, gap)}
            if gap:
                g["gap"] = Graph(lambda: None, calls, side, gap)
            self.graphs[mode] = g
            self.times[mode] = {k: [] for k in g}
        sync()

    def name(self):
        return f"grid b={self.b} s_q={self.sq} h={self.h}"

    def measure(self, reps):
        """One round: each mode's graphs interleaved; the gap's median subtracted from both sides'."""
        for mode, g in self.graphs.items():
            keys = list(g)
            samples = interleaved([g[k].time for k in keys], reps)
            medians = {k: statistics.median(s) for k, s in zip(keys, samples)}
            gap = medians.get("gap", 0.0)
            for k in keys:
                self.times[mode][k].append(medians[k] - (gap if k != "gap" else 0.0))

    def check(self):
        """Each mode's graphs replayed once more after their outputs were filled with NaN, then every
        row against the float32 references."""
        want368 = self.bench.ref368(self.qh, self.ix)
        want656 = self.bench.ref656(self.qh, self.ix)
        checks = {}
        for mode, g in self.graphs.items():
            nan_(self.out, self.lse, *g["flashmla"].result)
            g["attend368"].replay()
            g["flashmla"].replay()
            sync()
            checks[f"attend368 {mode}"] = ref.row_check(self.out, self.lse, *want368)
            checks[f"flashmla {mode}"] = peer_lse_check(*peer_view(*g["flashmla"].result, self.h), *want656)
        return checks

    def row(self, checks):
        flops = 2.0 * self.b * self.sq * self.h * TOPK * (D + DV)
        modes = {}
        for mode, t in self.times.items():
            m = {"flashmla_us": summarize(t["flashmla"]), "attend368_us": summarize(t["attend368"]),
                 "ratio": ratio_summary(t["flashmla"], t["attend368"]), **stability(t["flashmla"], t["attend368"])}
            if "gap" in t:
                m["gap_us"] = summarize(t["gap"])
            m["attend368_tflops"] = flops / m["attend368_us"]["median"] / 1e6
            modes[mode] = m
        ok = all(c["check"] == "PASS" for c in checks.values())
        return {"batch": self.b, "s_q": self.sq, "h": self.h, "flashmla_heads": self.q.shape[2], "modes": modes,
                "checks": checks, "check": "PASS" if ok else "FAIL"}

    def drifts(self):
        return [(f"{self.name()} {mode}", drift(t["flashmla"]), drift(t["attend368"])) for mode, t in self.times.items()]


class Decode128:
    """Batch 128 at one h, eager back-to-back launches: FlashMLA, attend on 656 and on 368 records."""
    SIDES = ("flashmla", "attend656", "attend368")
    BATCH = 128

    def __init__(self, bench, h):
        self.bench, self.h, b = bench, h, self.BATCH
        self.q, self.idx = bench.queries(b, 1, h)
        self.qh, self.ix = self.q[:, 0, :h].contiguous(), self.idx.view(b, TOPK)
        self.meta, self.peer_lse = {}, None
        self.peer_out = torch.empty(b, 1, self.q.shape[2], DV, dtype=torch.bfloat16, device=DEVICE)
        bench.flash_decode(self.q, self.idx, self.meta, self.peer_out)
        self.out = {s: torch.empty(b, h, DV, dtype=torch.bfloat16, device=DEVICE) for s in self.SIDES[1:]}
        self.lse = {s: torch.empty(b, h, dtype=torch.float32, device=DEVICE) for s in self.SIDES[1:]}
        stream = current_stream()
        run = {s: bench.ctx.prepare_attend(self.qh, self.ix, cache, self.out[s], lse=self.lse[s], sm_scale=bench.sm,
                                           stream=stream, **lay).run
               for s, cache, lay in (("attend656", bench.c656, L656), ("attend368", bench.c368, L368))}
        self.calls = {"flashmla": self.flash, **run}
        self.times = {s: [] for s in self.SIDES}
        # each side's outputs, filled with NaN before that side's timed block (only its own: the
        # blocks alternate, and each check reads what its side's last block wrote)
        self.poisons = {"flashmla": lambda: nan_(self.peer_out),
                        **{s: (lambda s=s: nan_(self.out[s], self.lse[s])) for s in self.SIDES[1:]}}

    def flash(self):
        self.peer_out, self.peer_lse = self.bench.flash_decode(self.q, self.idx, self.meta, self.peer_out)

    def name(self):
        return f"decode b=128 h={self.h}"

    def measure(self, reps):
        samples = interleaved([launches_us(self.calls[s], 20, self.poisons[s]) for s in self.SIDES], reps)
        for s, v in zip(self.SIDES, samples):
            self.times[s].append(statistics.median(v))

    def check(self):
        sync()
        want656, want368 = self.bench.ref656(self.qh, self.ix), self.bench.ref368(self.qh, self.ix)
        return {"flashmla": peer_lse_check(*peer_view(self.peer_out, self.peer_lse, self.h), *want656),
                "attend656": ref.row_check(self.out["attend656"], self.lse["attend656"], *want656),
                "attend368": ref.row_check(self.out["attend368"], self.lse["attend368"], *want368)}

    def row(self, checks):
        t = self.times
        flops = 2.0 * self.BATCH * self.h * TOPK * (D + DV)
        return {"h": self.h, "flashmla_heads": self.q.shape[2], "flashmla_us": summarize(t["flashmla"]),
                "attend656_us": summarize(t["attend656"]), "attend368_us": summarize(t["attend368"]),
                "ratio368": ratio_summary(t["flashmla"], t["attend368"]),
                "ratio656": ratio_summary(t["flashmla"], t["attend656"]), **stability(t["flashmla"], t["attend368"]),
                "kept656": stability(t["flashmla"], t["attend656"])["kept"], "attend656_drift": drift(t["attend656"]),
                "attend368_tflops": flops / statistics.median(t["attend368"]) / 1e6, "checks": checks,
                "check": "PASS" if all(c["check"] == "PASS" for c in checks.values()) else "FAIL"}

    def drifts(self):
        t = self.times
        return [(self.name(), drift(t["flashmla"]), drift(t["attend368"])),
                (f"{self.name()} on 656", drift(t["flashmla"]), drift(t["attend656"]))]


class Prefill:
    """4096 query tokens at one h: FlashMLA's bf16 prefill, attend on 368 records, gather + prefill;
    blocks of 3 launches, each side alone, then interleaved."""
    SIDES = ("flashmla_bf16", "attend368", "gather_flashmla")
    S_Q = 4096

    def __init__(self, bench, h, idx, context):
        self.bench, self.h, self.idx = bench, h, idx
        s_q = self.S_Q
        self.q = torch.randn(s_q, h, D, device=DEVICE, generator=bench.gen).to(torch.bfloat16)
        self.out = torch.empty(s_q, h, DV, dtype=torch.bfloat16, device=DEVICE)
        self.lse = torch.empty(s_q, h, dtype=torch.float32, device=DEVICE)
        a368 = bench.ctx.prepare_attend(self.q, idx, bench.c368, self.out, lse=self.lse, sm_scale=bench.sm,
                                        stream=current_stream(), **L368).run
        ind, slots = idx.view(s_q, 1, TOPK), torch.arange(context, device=DEVICE, dtype=torch.int32)
        scratch = torch.empty(context, 1, D, dtype=torch.bfloat16, device=DEVICE)
        self.result = {}

        def flash():
            self.result["flashmla_bf16"] = bench.fm.sparse_prefill_fwd(self.q, bench.dense, ind, bench.sm, DV, None,
                                                                       None, None)

        def gather_then_flash():  # the context's records to bf16 (an engine without this reader), then prefill
            bench.ctx.gather(bench.c368, slots, scratch.view(context, D), **L368)
            self.result["gather_flashmla"] = bench.fm.sparse_prefill_fwd(self.q, scratch, ind, bench.sm, DV, None,
                                                                         None, None)

        self.calls = {"flashmla_bf16": flash, "attend368": a368, "gather_flashmla": gather_then_flash}
        self.times = {kind: {s: [] for s in self.SIDES} for kind in ("alone", "interleaved")}

    def poison(self):
        nan_(self.out, self.lse)

    def name(self):
        return f"prefill h={self.h}"

    def measure(self, reps):
        # attend's out and lse filled with NaN before its own blocks only (FlashMLA's are allocated per call)
        timers = [launches_us(self.calls[s], 3, self.poison if s == "attend368" else None) for s in self.SIDES]
        for s, timer in zip(self.SIDES, timers):  # alone: one side's blocks in a row
            v = interleaved([timer], reps, warmup=1)[0]
            self.times["alone"][s].append(statistics.median(v))
        for s, v in zip(self.SIDES, interleaved(timers, reps, warmup=1)):
            self.times["interleaved"][s].append(statistics.median(v))

    def check(self):
        sync()
        checks = {"attend368": ref.row_check(self.out, self.lse, *self.bench.ref368(self.q, self.idx))}
        want = self.bench.ref_dense(self.q, self.idx)  # FlashMLA reads the gathered bf16 rows
        for s in ("flashmla_bf16", "gather_flashmla"):
            out, _, lse = self.result[s][:3]
            checks[s] = peer_lse_check(out, lse, *want)
        return checks

    def row(self, checks):
        flops = 2.0 * self.S_Q * self.h * TOPK * (D + DV)
        row = {"h": self.h, "s_q": self.S_Q, "checks": checks,
               "check": "PASS" if all(c["check"] == "PASS" for c in checks.values()) else "FAIL"}
        for kind, t in self.times.items():
            row[kind] = {f"{s}_us": summarize(t[s]) for s in self.SIDES}
            row[kind].update(ratio=ratio_summary(t["flashmla_bf16"], t["attend368"]),
                             ratio_vs_gather=ratio_summary(t["gather_flashmla"], t["attend368"]),
                             **stability(t["flashmla_bf16"], t["attend368"]),
                             attend368_tflops=flops / statistics.median(t["attend368"]) / 1e6)
        return row

    def drifts(self):
        return [(f"{self.name()} {kind}", drift(t["flashmla_bf16"]), drift(t["attend368"]))
                for kind, t in self.times.items()]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashmla", help="path of _flashmla_C.abi3.so (default: import vllm._flashmla_C)")
    ap.add_argument("--flashmla-wheel", default="vllm==0.33.0",
                    help="the wheel --flashmla came from, for the provenance when .anchor has no "
                         "_flashmla_C.source.json (tools/flashmla-fetch's default)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--quick", action="store_true",
                    help="a smaller run (1 M tokens, batch 1/4/32/128, h 16/128, 3 reps, prefill h 16)")
    ap.add_argument("--heads", type=int, nargs="*", default=[16, 32, 64, 128])
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--prefill-heads", type=int, nargs="*", default=[16, 128])
    ap.add_argument("--tokens", type=int, default=4 << 20)
    ap.add_argument("--calls", type=int, default=20, help="captures of each call in one graph")
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions a side, a round")
    ap.add_argument("--rounds", type=int, default=5,
                    help="passes over everything (>= 3 for a headline; from 5, drift sets the extreme rounds aside)")
    ap.add_argument("--round-gap", type=float, default=40.0,
                    help="seconds between recorded rounds (the GPU idle; a short GEMM warm-up after each gap)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="unrecorded passes before the rounds")
    ap.add_argument("--max-drift", "--max-peer-drift", dest="max_drift", type=float, default=0.03,
                    help="either side's largest move between rounds in a kept cell (0.03 = 3%%); a cell past it is "
                         "marked drifted and left out of the claims")
    ap.add_argument("--flush-l2", action="store_true", help="add the after_flush mode to the grid")
    ap.add_argument("--skip", choices=["grid", "decode", "prefill"], action="append", default=[])
    args = ap.parse_args(argv)
    if args.quick:
        args.tokens, args.batches, args.heads, args.reps, args.prefill_heads = 1 << 20, [1, 4, 32, 128], [16, 128], 3, [16]
    return args


def build_rows(bench, args):
    """Every timed row, set up before the first round (graphs captured, metadata computed)."""
    rows = {"grid": [], "decode": [], "prefill": []}
    if "grid" not in args.skip:
        cells = [(b, 1, h) for h in args.heads for b in args.batches]
        cells += [(b, 2, h) for h in args.heads for b in args.batches if b <= 32]
        rows["grid"] = [GridCell(bench, b, sq, h) for b, sq, h in cells]
    if "decode" not in args.skip:
        rows["decode"] = [Decode128(bench, h) for h in args.heads]
    if "prefill" not in args.skip:
        context = min(bench.n, 2 << 20)
        idx = torch.randint(0, context, (Prefill.S_Q, TOPK), device=DEVICE, generator=bench.gen, dtype=torch.int32)
        rows["prefill"] = [Prefill(bench, h, idx, context) for h in args.prefill_heads]
    sync()
    return rows


def print_row(section, r):
    """One line a row: medians, ratio with its range over rounds, FlashMLA's drift, the checks."""
    def fig(t, scale=1.0):
        return f"{t['median'] / scale:7.2f} [{t['min'] / scale:.2f}-{t['max'] / scale:.2f}]"

    def ratio(x):
        return f"{x['median']:.2f}x [{x['min']:.2f}-{x['max']:.2f}]"

    def moved(v):
        return (f"drift FlashMLA {v['peer_drift']:.1%} attend {v['attend_drift']:.1%}"
                + ("" if v["kept"] else " DRIFTED: left out of the claims"))

    worst = max(r["checks"].values(), key=lambda c: c["worst_rel_rms"])
    check = f"checks {r['check']} (worst rel RMS {worst['worst_rel_rms']:.1e}, lse {worst['worst_lse']:.1e})"
    if section == "grid":
        parts = [f"{m}: FlashMLA {fig(v['flashmla_us'])} attend {fig(v['attend368_us'])} {ratio(v['ratio'])} "
                 f"{moved(v)}" for m, v in r["modes"].items()]
        print(f"b={r['batch']:3d} s_q={r['s_q']} h={r['h']:3d} | " + " | ".join(parts) + f" | {check}")
    elif section == "decode":
        print(f"decode b=128 h={r['h']:3d} eager: FlashMLA {fig(r['flashmla_us'])} | attend-656 "
              f"{fig(r['attend656_us'])} {ratio(r['ratio656'])} | attend-368 {fig(r['attend368_us'])} "
              f"{ratio(r['ratio368'])} {r['attend368_tflops']:.1f} TFLOP/s | {moved(r)} | {check}")
    else:
        for kind in ("alone", "interleaved"):
            v = r[kind]
            print(f"prefill h={r['h']:3d} {kind:11s}: FlashMLA bf16 {fig(v['flashmla_bf16_us'], 1e3)} ms | attend-368 "
                  f"{fig(v['attend368_us'], 1e3)} ms {ratio(v['ratio'])} | gather+FlashMLA "
                  f"{fig(v['gather_flashmla_us'], 1e3)} ms | {moved(v)}")
        print(f"prefill h={r['h']:3d}: {check}")
    sys.stdout.flush()


def clear_times(times):
    """Empties every sample list in a row's nested `times` (a warm-up round's samples go)."""
    for v in times.values():
        if isinstance(v, list):
            v.clear()
        else:
            clear_times(v)


def run_rounds(rows, args, warm=None):
    """Every row's measure(), in order, a round: args.warmup_rounds unrecorded passes first (on the H200
    the first cells of a fresh process read both sides 4-12% apart from the later rounds: FlashMLA's
    'drift' refused three headlines in a row), then args.rounds recorded ones, args.round_gap seconds
    apart (when the args have one), warm() after each gap. bench/attend_probes.py runs its cases with
    it too."""
    gap = getattr(args, "round_gap", 0.0) or 0.0
    for r in range(args.warmup_rounds + args.rounds):
        if r > args.warmup_rounds and gap > 0:
            time.sleep(gap)
            if warm:
                warm()
        start = time.time()
        for row in rows:
            row.measure(args.reps)
        warm = r < args.warmup_rounds
        if warm:
            for row in rows:
                clear_times(row.times)
        label = f"warm-up round {r + 1}" if warm else f"round {r + 1 - args.warmup_rounds} of {args.rounds}"
        print(f"{label}: {time.time() - start:.0f} s")
        sys.stdout.flush()


def checked(row):
    """A row's checks; one that cannot run (an exception) is a failed check, not a lost run."""
    try:
        return row.check()
    except Exception as exc:  # noqa: BLE001  (the timings are kept and the failure said)
        print(f"{row.name()}: the check could not run: {exc!r}")
        return {"error": {"check": "FAIL", "error": repr(exc), "rows": 0, "failed_rows": 0, "worst_rel_rms": math.inf,
                          "worst_excess": math.inf, "worst_lse": math.inf, "first_failed_row": -1,
                          "bounds": dict(ref.BOUNDS)}}


def matmul_tflops(n=8192):
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    us = statistics.median([event_us(lambda: a @ a, 1) for _ in range(7)])
    return 2 * n**3 / us / 1e6


def main(argv=None):
    global MAX_DRIFT
    args = parse_args(argv)
    MAX_DRIFT = args.max_drift
    started = time.time()
    fm = load_flashmla(args.flashmla)
    plugin = nvfp4_mla.load()
    ctx = nvfp4_mla.Context(plugin, "cuda:0" if DEVICE == "cuda" else "cpu")
    ref.strict_float32()
    peer = {"path": args.flashmla, "wheel": args.flashmla_wheel} if args.flashmla else None
    prov = provenance.collect(plugin, torch, argv=sys.argv if argv is None else ["bench/flashmla_compare.py"] + argv,
                              peer=peer)
    print(f"device: {ctx.device_name}; plugin {plugin.path} "
          f"(git {prov['plugin']['git_revision']}); driver {prov['device']['driver']}")
    report = {"provenance": prov, "bf16_matmul_tflops": matmul_tflops(8192 if DEVICE == "cuda" else 256),
              "config": {"tokens": args.tokens, "topk": TOPK, "calls_per_graph": args.calls, "reps": args.reps,
                         "rounds": args.rounds, "round_gap_s": args.round_gap, "gemm": list(GEMM),
                         "max_drift": args.max_drift,
                         "quick": args.quick, "check_bounds": ref.BOUNDS,
                         "reference": "float32 attention over the records' values (bench/attend_reference.py): "
                                      "368 decoded (bf16 of it equal to the plugin's gather), 656 decoded; "
                                      "FlashMLA's prefill against the gathered bf16 rows it reads"}}
    print(f"ceiling bf16 matmul 8192^3: {report['bf16_matmul_tflops']:.0f} TFLOP/s")
    bench = Bench(fm, ctx, args)
    report["config"]["decode_matches_gather"] = bench.decode_matches_gather()
    if not report["config"]["decode_matches_gather"]:
        print("the reference's decode of the 368 records differs from the plugin's gather: no check would mean "
              "anything (bench/attend_reference.py, decode_368)")
        return 1
    rows = build_rows(bench, args)
    print(f"set-up: {time.time() - started:.0f} s")
    run_rounds([row for section in ("grid", "decode", "prefill") for row in rows[section]], args, bench.warm)
    drifts = []
    for section in ("grid", "decode", "prefill"):
        report[section] = []
        for row in rows[section]:
            report[section].append(row.row(checked(row)))
            drifts += row.drifts()
            print_row(section, report[section][-1])
    report["headline"] = headline(drifts, args.rounds, args.max_drift)
    report["seconds"] = round(time.time() - started, 1)
    failed = sum(r["check"] == "FAIL" for s in ("grid", "decode", "prefill") for r in report[s])
    report["checks"] = "all PASS" if not failed else f"{failed} row(s) FAIL"
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"checks: {report['checks']}; {report['seconds']:.0f} s")
    h = report["headline"]
    if h["refused"]:
        print(f"no headline: {h['reason']}")
    print(f"kept {h['kept']} of {h['cells']} cells (neither side moved more than {h['max_drift']:.0%} between "
          f"rounds)" + (f"; dropped: " + ", ".join(f"{d['where']} (FlashMLA {d['peer_drift']:.1%}, attend "
                                                  f"{d['attend_drift']:.1%})" for d in h["dropped"]) if h["dropped"]
                        else ""))
    return 1 if failed else 2 if report["headline"]["refused"] else 0


if __name__ == "__main__":
    sys.exit(main())
