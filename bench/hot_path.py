"""Host microseconds per write and attend call through the shim, one-shot and prepared, and the time
per decode step, eager and from a CUDA graph (BENCHMARKS.md, issues 17 and 47).

Two kinds of figure, labelled as such in the output and the JSON:
  host launch rate  what the calling thread spends a call (perf_counter): the host's cost, not
                    the GPU's. The target: <= 8 us a prepared attend `run()` (issue 17), printed
                    per cell with whether it meets it;
  GPU time          CUDA events around work the GPU does without waiting for the host.
A decode step replayed from a graph of ONE step, one replay after another, is timed between events
but paced by the host's cudaGraphLaunch when that costs more than the step: the column "step graph
replay" is such a rate, and the row says which bound it ("host" when the replay's host time is at
least 80% of its event time). "step graph GPU" replays a graph of 20 steps: the GPU time a step.

Host time is what the calling thread spends in one call: `calls` back-to-back calls are timed with
perf_counter from an idle device (synchronised before, not inside, the timed loop; the launch queue
holds them all), and the median over `reps` is divided by `calls`, after 0.2 s of the same calls (a
cold process reads its first rows up to 1.6x slower). Forms:
  one-shot   Context.write / Context.attend (every array described and checked per call);
  arrays     a prepared call given new arrays (pointers and row counts read per call);
  run        a prepared call on its bound buffers (what a CUDA graph or persistent buffers use);
  op         the PyTorch operator (nvfp4_mla.torch_ops, bound with bind(): torch.ops.nvfp4_mla.write,
             attend_out into the bound out), what torch.compile calls; measured where PyTorch is
             installed (on the CPU backend the numpy buffers are shared as CPU tensors);
  op new     the functional attend op, which allocates out and lse per call.
A decode step is one layer's write of `batch` new tokens then attend of `batch` queries over top-k
2048 random slots. On CUDA it is timed between CUDA events (median of `reps` runs of `calls` steps):
eager one-shot and eager prepared (host launch rates at small batches), replays of a graph holding
one step (host or GPU bound, said per row), and replays of a graph holding 20 steps (GPU time).

On the CPU backend (no PyTorch or no CUDA device; or --device cpu) only host time is measured, on
zero-row calls: the shim's and the plugin's per-call work without kernel work, labelled CPU backend.

Usage (GPU machine, PyTorch with CUDA):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/hot_path.py [--device cuda|cpu] [--json hot_path.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368 as LAYOUT, SCALE_PER_TOKEN as MODE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402  (bench/provenance.py)
from figures import STEP_COLUMNS  # noqa: E402  (the step table's columns, as BENCHMARKS.md renders them)

TOPK, SM_SCALE = 2048, 576 ** -0.5
KW = dict(layout=LAYOUT, scale_mode=MODE)


def host_us(fn, calls, reps, sync, warm_s=0.2):
    """Median host microseconds per call of `calls` back-to-back calls, after `warm_s` seconds of
    the same calls (the host's clocks and caches settle: the first rows of a cold process read up
    to 1.6x slower)."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        for _ in range(calls):
            fn()
        sync()
    samples = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
        sync()
    return statistics.median(samples)


class Buffers:
    """One layer's decode buffers at (batch, h): new tokens, their slots, q, top-k, out, the cache."""

    def __init__(self, lib, batch, heads, cache, topk, seed):
        self.batch, self.heads, self.cache = batch, heads, cache
        self.kv = lib.tokens((batch, 576), seed)
        self.slots = lib.slots(batch, seed)
        self.q = lib.tokens((batch, heads, 576), seed + 1)
        self.topk = lib.topk((batch, topk), seed)
        self.out = lib.empty_out((batch, heads, 512))

    def one_shot_write(self, ctx, stream=None):
        ctx.write(self.kv[:, :512], self.kv[:, 512:], self.slots, self.cache, stream=stream, **KW)

    def one_shot_attend(self, ctx, stream=None):
        ctx.attend(self.q, self.topk, self.cache, self.out, sm_scale=SM_SCALE, stream=stream, **KW)

    def prepare(self, ctx, stream=None):
        w = ctx.prepare_write(self.kv[:, :512], self.kv[:, 512:], self.slots, self.cache, stream=stream, **KW)
        a = ctx.prepare_attend(self.q, self.topk, self.cache, self.out, sm_scale=SM_SCALE, stream=stream, **KW)
        return w, a


class NumpyLib:
    """CPU-backend arrays (zero-row calls by default: the per-call work without kernel work)."""
    device, cache_tokens = "cpu", 1024

    def __init__(self):
        self.sync = lambda: None

    def tokens(self, shape, seed):
        return nvfp4_mla.bf16_bits(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))

    def slots(self, n, seed):
        return np.arange(n, dtype=np.int64)

    def topk(self, shape, seed):
        return np.random.default_rng(seed).integers(0, 1024, shape).astype(np.int32)

    def empty_out(self, shape):
        return np.zeros(shape, np.uint16)

    def cache(self, tokens):
        return np.zeros((tokens // 64, 64, 368), np.uint8)

    def as_torch(self, a):
        """A CPU tensor sharing the array's memory (uint16 bf16 bits as torch.bfloat16); an empty array
        (the zero-row calls) as a new empty tensor, since numpy gives those zero strides."""
        import torch
        t = torch.from_numpy(a.view(np.int16) if a.dtype == np.uint16 else a)
        t = t.view(torch.bfloat16) if a.dtype == np.uint16 else t
        return torch.empty(t.shape, dtype=t.dtype) if a.size == 0 else t


class TorchLib:
    """PyTorch CUDA tensors on cuda:0."""
    device = "cuda:0"

    def __init__(self, torch, cache_tokens):
        self.torch, self.cache_tokens = torch, cache_tokens
        self.gen = torch.Generator(device="cuda").manual_seed(17)
        self.sync = torch.cuda.synchronize

    def tokens(self, shape, seed):
        return self.torch.randn(*shape, device="cuda", generator=self.gen).to(self.torch.bfloat16)

    def slots(self, n, seed):  # the newest slots of the cache, as a decode step appends
        return self.torch.arange(self.cache_tokens - n, self.cache_tokens, device="cuda")

    def topk(self, shape, seed):
        return self.torch.randint(0, self.cache_tokens, shape, device="cuda", generator=self.gen,
                                  dtype=self.torch.int32)

    def empty_out(self, shape):
        return self.torch.empty(*shape, dtype=self.torch.bfloat16, device="cuda")

    def cache(self, tokens):
        return self.torch.zeros(tokens // 64, 64, 368, dtype=self.torch.uint8, device="cuda")

    def as_torch(self, a):
        return a


def host_rows(lib, ctx, cache, grid, calls, reps):
    """Host us per call of write and attend in each form, per (h, batch) of the grid."""
    rows = []
    for heads, batch in grid:
        b = Buffers(lib, batch, heads, cache, TOPK, heads * 1000 + batch)
        w, a = b.prepare(ctx)
        kv_c, k_pe = b.kv[:, :512], b.kv[:, 512:]
        forms = {
            "write one-shot": lambda: b.one_shot_write(ctx),
            "write arrays": lambda: w(kv_c, k_pe, b.slots),
            "write run": w.run,
            "attend one-shot": lambda: b.one_shot_attend(ctx),
            "attend arrays": lambda: a(b.q, b.topk, b.out),
            "attend run": a.run,
        }
        forms.update(op_forms(lib, ctx, b))
        row = {"h": heads, "batch": batch, "backend": lib.device}
        for name, fn in forms.items():
            row[name] = round(host_us(fn, calls, reps, lib.sync), 2)
        rows.append(row)
    return rows


def op_forms(lib, ctx, b):
    """The torch ops' forms for these buffers (none where PyTorch is not installed)."""
    try:
        from nvfp4_mla import torch_ops
    except ImportError:
        return {}
    ops = torch_ops.bind(ctx, **KW)
    kv, slots, q, topk, out, cache = (lib.as_torch(a) for a in (b.kv, b.slots, b.q, b.topk, b.out, b.cache))
    kv_c, k_pe = kv[:, :512], kv[:, 512:]
    return {
        "write op": lambda: ops.write(kv_c, k_pe, slots, cache),
        "attend op": lambda: ops.attend(q, topk, cache, sm_scale=SM_SCALE, out=out),
        "attend op new": lambda: ops.attend(q, topk, cache, sm_scale=SM_SCALE),
    }


def device_us(torch, stream, fn, calls, reps):
    """Median us per call of `calls` back-to-back calls on `stream`, between CUDA events."""
    fn()
    stream.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(calls):
            fn()
        end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(samples)


def graph_of(torch, side, step, count):
    """A CUDA graph of `count` steps captured on `side`, and a function replaying it there."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        for _ in range(count):
            step()

    def replay():
        with torch.cuda.stream(side):
            graph.replay()
    return graph, replay


GPU_STEPS = 20  # steps in the graph whose replay gives the GPU time a step


def step_rows(lib, ctx, cache, grid, calls, reps):
    """us per decode step (write then attend): eager one-shot and prepared, one-step graph replays (with
    their host us a replay, and which of host or GPU bounds them), and a 20-step graph's GPU time."""
    torch, rows = lib.torch, []
    fill = lib.tokens((65536, 576), 5)
    for first in range(0, lib.cache_tokens, 65536):  # real records for attend to read
        ctx.write(fill[:, :512], fill[:, 512:], torch.arange(first, first + 65536, device="cuda"), cache, **KW)
    for heads, batch in grid:
        b = Buffers(lib, batch, heads, cache, TOPK, heads * 1000 + batch)
        side = torch.cuda.Stream()
        w, a = b.prepare(ctx, stream=side)
        torch.cuda.synchronize()  # the buffers were filled on the default stream
        with torch.cuda.stream(side):
            w.run(), a.run(), b.one_shot_write(ctx, side), b.one_shot_attend(ctx, side)  # warm-up, workspaces
        side.synchronize()
        step = lambda: (w.run(), a.run())  # noqa: E731
        one, replay = graph_of(torch, side, step, 1)
        many, replay_many = graph_of(torch, side, step, GPU_STEPS)
        row = {"h": heads, "batch": batch, "backend": lib.device}
        row["step one-shot"] = round(device_us(torch, side, lambda: (b.one_shot_write(ctx, side),
                                                                     b.one_shot_attend(ctx, side)), calls, reps), 2)
        row["step prepared"] = round(device_us(torch, side, step, calls, reps), 2)
        row["step graph replay"] = round(device_us(torch, side, replay, calls, reps), 2)
        row["graph replay host"] = round(host_us(replay, calls, reps, side.synchronize), 2)
        row["step graph GPU"] = round(device_us(torch, side, replay_many, max(1, calls // GPU_STEPS), reps)
                                      / GPU_STEPS, 2)
        row["replay bound by"] = "host" if row["graph replay host"] >= 0.8 * row["step graph replay"] else "GPU"
        rows.append(row)
        del one, many
    return rows


def table(rows, columns):
    lines = ["| h | batch | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for r in rows:
        lines.append(f"| {r['h']} | {r['batch']} | " + " | ".join(
            f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in columns) + " |")
    return "\n".join(lines)


def pick_lib(device, cache_tokens):
    """TorchLib on CUDA when asked for (or, by default, when PyTorch sees a GPU); else NumpyLib."""
    if device in ("auto", "cuda"):
        try:
            import torch
            if torch.cuda.is_available():
                return TorchLib(torch, cache_tokens)
        except ImportError:
            pass
        if device == "cuda":
            sys.exit("hot_path: --device cuda needs PyTorch with a CUDA device")
        print("hot_path: no PyTorch with CUDA here: CPU backend, host time only (zero-row calls)")
    return NumpyLib()


TARGET_US = 8.0  # host us a prepared attend run() (issue 17; issue 47 re-measured it)


def mark_target(host):
    """Each row's verdict on the run() target; prints it per cell and returns the cells that miss it."""
    missed = []
    for r in host:
        r["attend run <= 8 us"] = "yes" if r["attend run"] <= TARGET_US else "no"
        print(f"h = {r['h']:3d} batch {r['batch']:3d}: attend run() {r['attend run']:6.2f} us host "
              f"({'meets' if r['attend run'] <= TARGET_US else 'OVER'} the {TARGET_US:.0f} us target); "
              f"write run() {r['write run']:.2f} us")
        if r["attend run"] > TARGET_US:
            missed.append(r)
    print(f"attend run() <= {TARGET_US:.0f} us host: {len(host) - len(missed)} of {len(host)} cells")
    return missed


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--plugin", help="plugin path (default: NVFP4_MLA_PLUGIN)")
    p.add_argument("--calls", type=int, default=100, help="back-to-back calls per sample")
    p.add_argument("--reps", type=int, default=15, help="samples; the median is reported")
    p.add_argument("--cache-tokens", type=int, default=1 << 20, help="CUDA cache size in tokens")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    lib = pick_lib(args.device, args.cache_tokens)
    plugin = nvfp4_mla.load(args.plugin) if args.plugin else nvfp4_mla.load()
    cuda = lib.device != "cpu"
    batches = (1, 8, 32, 128) if cuda else (0,)
    grid = [(h, n) for h in (16, 128) for n in batches]
    with nvfp4_mla.Context(plugin, lib.device) as ctx:
        where = "PyTorch CUDA tensors, " + ctx.device_name if cuda else "CPU backend, numpy, zero-row calls"
        print(f"# host launch rate: host us per call, the calling thread's time, not GPU time ({where})")
        cache = lib.cache(lib.cache_tokens)
        host = host_rows(lib, ctx, cache, grid, args.calls, args.reps)
        print(table(host, [k for k in host[0] if " " in k]))
        if "write op" not in host[0]:
            print("(torch ops not measured: PyTorch is not installed)")
        missed = mark_target(host)
        steps = step_rows(lib, ctx, cache, grid, args.calls, args.reps) if cuda else []
        if steps:
            print(f"\n# us per decode step (write of batch tokens + attend, top-k {TOPK}), between CUDA events: "
                  "eager and one-step replays are host launch rates where the host bounds them ('replay bound "
                  f"by'); 'step graph GPU' is GPU time (a graph of {GPU_STEPS} steps)")
            print(table(steps, STEP_COLUMNS))
    if args.json:
        torch = getattr(lib, "torch", None)
        report = {"provenance": provenance.collect(plugin, torch), "target_attend_run_us": TARGET_US,
                  "attend_run_over_target": [f"h={r['h']} batch={r['batch']}" for r in missed],
                  "labels": {"host_us_per_call": "host launch rate: the calling thread's us a call (perf_counter)",
                             "step_us": "us a decode step between CUDA events; 'step graph GPU' is GPU time, "
                                        "'step graph replay' a one-step graph's replay rate ('replay bound by')"},
                  "host_us_per_call": host, "step_us": steps, "topk": TOPK, "calls": args.calls, "reps": args.reps}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
