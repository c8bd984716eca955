"""Same-process A/B of plugin builds on identical data (BENCHMARKS.md: "no slower" checks of a kernel
change): prefill 4096 queries x h = 128 / 16 and decode batch 128 x h = 128 / 64, eager back-to-back
launches of each build's prepared attend, the builds interleaved (flashmla_compare's timers), and
whether each build's output is bit-identical to the first build's. `--decode-heads H...` replaces those
shapes with decode batch 128 at each h given (issue 34's "batch 128 no slower" at every h).

The first plugin is the base; every other is timed against it on the same cache, queries and top-k
(issue 54 times several candidate designs in one device call: one cache write and one reference a
shape, whatever the number of builds).

Check: every build's output of its last timed launch, and its lse, against a float32 attention over
the records' values (bench/attend_reference.py, the bounds of tests/test_gpu_attend.c), so that a
design that is not bit-identical (a reordered sum, a folded score) is held to the tests' numerics in
the run that times it. A failed check: the row says FAIL and the exit status is 1.

`--records 656` writes FlashMLA's 656-byte fp8_ds_mla records (bench/attend_reference.py's rule) and
times the 656 reader instead. `--small` times light calls the way an engine runs them: batch 1, 2, 4, 8
x h 64 / 128 (s_q 1), each build's call captured 20 times in one CUDA graph and the graphs replayed
between events, builds alternated (issue 54's small-batch regression).

Usage (GPU machine): PYTHONPATH=host_shims/python python3 bench/attend_ab.py BASE.so NEW.so [NEW2.so ...]
    [--decode-heads 16 32 64 128 | --shapes LABEL:QUERIES:HEADS:LAUNCHES,...] [--records 368|656] [--small]
A build is named by its build folder (build-d2/plugin/libnvfp4_mla.so: "build-d2").
tests/check_bench_scripts.py runs it on the CPU backend (flashmla_compare.DEVICE "cpu", small shapes:
its times are wall-clock and mean nothing there).
"""
import argparse
import math
import os
import statistics
import sys

import torch

import nvfp4_mla

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attend_reference as ref  # noqa: E402  (bench/, beside this file)
import flashmla_compare as fc  # noqa: E402  (its device, layouts, data and timers: the comparison's own)

D, DV = 576, 512
# The cache size and top-k; the CPU check (tests/check_bench_scripts.py) makes them small, and sets
# fc.DEVICE, the device everything here runs on.
TOKENS, TOPK = 2 << 20, 2048
SAMPLES = 7  # timed samples a build and shape, the builds interleaved
SMALL = tuple((f"graph b {b} x h {h}", b, h, 20) for h in (64, 128) for b in (1, 2, 4, 8))
SHAPES = (("prefill 4096 x h 128", 4096, 128, 3), ("prefill 4096 x h 16", 4096, 16, 3),
          ("decode 128 x h 128", 128, 128, 20), ("decode 128 x h 64", 128, 64, 20))


def build_names(paths):
    """A name a plugin: its build folder (the folder above plugin/), made unique with #2, #3."""
    names = []
    for p in paths:
        parent = os.path.dirname(os.path.abspath(p))
        name = os.path.basename(os.path.dirname(parent)) if os.path.basename(parent) == "plugin" else os.path.basename(p)
        names.append(name if name not in names else f"{name} #{len(names) + 1}")
    return names


def write_cache(ctx, rb, gen):
    """TOKENS of the comparison's tokens (fc.make_tokens), every record written: 368 by the base's
    writer, 656 by FlashMLA's rule (attend_reference.fp8_ds_mla_records)."""
    cache = torch.empty(TOKENS // 64, 64, rb, dtype=torch.uint8, device=fc.DEVICE)
    flat = cache.view(TOKENS, rb)

    def fill(first, x):
        if rb == 656:
            flat[first:first + x.shape[0]] = ref.fp8_ds_mla_records(x)
        else:
            ctx.write(x[:, :DV], x[:, DV:], torch.arange(first, first + x.shape[0], device=fc.DEVICE), cache, **fc.L368)

    fc.make_tokens(TOKENS, gen, fill)
    return cache


def timers_of(calls, outs, lses, launches, small, side):
    """Each build's timer (us a call): `launches` eager calls, or with --small one CUDA graph of
    them replayed (fc.Graph, captured on `side`); its out and lse filled with NaN before every sample,
    outside the events, so that the check reads what the last timed launch wrote."""
    timers = {}
    for k, call in calls.items():
        poison = (lambda k=k: fc.nan_(outs[k], lses[k]))
        if small:
            call.run()  # warm (the plugin builds its own launch state outside a capture)
            fc.sync()
            graph = fc.Graph(call.run, launches, side)
            timers[k] = lambda graph=graph, poison=poison: (poison(), graph.time())[1]
        else:
            timers[k] = fc.launches_us(call.run, launches, poison)
    return timers


def one_shape(ctxs, cache, rb, keys_of, shape, gen, small):
    """Times every build on one shape, checks each output; returns (its lines, whether all passed)."""
    label, nq, h, launches = shape
    names = list(ctxs)
    kw = fc.L656 if rb == 656 else fc.L368
    q = torch.randn(nq, h, D, device=fc.DEVICE, generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, TOKENS, (nq, TOPK), device=fc.DEVICE, generator=gen, dtype=torch.int32)
    outs = {k: torch.empty(nq, h, DV, dtype=torch.bfloat16, device=fc.DEVICE) for k in names}
    lses = {k: torch.empty(nq, h, dtype=torch.float32, device=fc.DEVICE) for k in names}
    side = torch.cuda.Stream() if small and fc.DEVICE == "cuda" else fc.current_stream()
    calls = {k: ctx.prepare_attend(q, idx, cache, outs[k], sm_scale=1 / math.sqrt(D), lse=lses[k], stream=side, **kw)
             for k, ctx in ctxs.items()}
    timers = timers_of(calls, outs, lses, launches, small, side)
    times = dict(zip(names, fc.interleaved([timers[k] for k in names], SAMPLES, warmup=1)))
    fc.sync()
    want, want_lse = ref.reference(q, idx, keys_of, 1 / math.sqrt(D))
    base = names[0]
    base_us = statistics.median(times[base])
    lines, all_pass = [], True
    for k in names:
        us = statistics.median(times[k])
        c = ref.row_check(outs[k], lses[k], want, want_lse)
        all_pass &= c["check"] == "PASS"
        same = torch.equal(outs[base].view(torch.int16), outs[k].view(torch.int16))
        diff = "" if same else (f", max |{base} - {k}| {(outs[base].float() - outs[k].float()).abs().max().item():.3g}")
        verdict = (f"check PASS (headroom {ref.headroom(c):.2g})" if c["check"] == "PASS" else
                   f"check FAIL ({c['failed_rows']} of {c['rows']} rows; first {c['first_failed_row']})")
        ratio = "" if k == base else f" {us / base_us:.3f}x of {base}"
        lines.append(f"{label}: {k} {us:9.1f} us [{min(times[k]):.1f}-{max(times[k]):.1f}]{ratio} | "
                     f"bit-identical to {base}: {same}{diff} | {verdict}")
    return lines, all_pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plugins", nargs="+", help="BASE.so NEW.so [NEW2.so ...]")
    ap.add_argument("--decode-heads", type=int, nargs="+", help="decode batch 128 at these h instead")
    ap.add_argument("--records", type=int, choices=(368, 656), default=368)
    ap.add_argument("--small", action="store_true", help="light calls in CUDA graphs (batch 1-8, h 64 / 128)")
    ap.add_argument("--shapes", help="shapes of one's own instead: 'LABEL:QUERIES:HEADS:LAUNCHES,...' (s_q 1)")
    args = ap.parse_args(argv)
    if len(args.plugins) < 2:
        ap.error("give a base plugin and at least one more to time against it")
    shapes = tuple((f"decode 128 x h {h}", 128, h, 20) for h in args.decode_heads) if args.decode_heads else SHAPES
    shapes = SMALL if args.small else shapes
    if args.shapes:
        shapes = tuple((lab, int(nq), int(h), int(n)) for lab, nq, h, n in (s.split(":") for s in args.shapes.split(",")))
    ref.strict_float32()
    rb = args.records
    ctxs = {name: nvfp4_mla.Context(nvfp4_mla.load(path), "cuda:0" if fc.DEVICE == "cuda" else "cpu")
            for name, path in zip(build_names(args.plugins), args.plugins)}
    gen = torch.Generator(device=fc.DEVICE).manual_seed(5)
    cache = write_cache(next(iter(ctxs.values())), rb, gen)
    decode = ref.decode_656 if rb == 656 else ref.decode_368
    keys_of = lambda ix: decode(cache.view(TOKENS, rb)[ix.reshape(-1)]).view(*ix.shape, D)  # noqa: E731
    all_pass = True
    for shape in shapes:
        lines, ok = one_shape(ctxs, cache, rb, keys_of, shape, gen, args.small)
        print("\n".join(lines), flush=True)
        all_pass &= ok
    if not all_pass:
        print("a build's output failed its check against the float32 reference: its times do not count")
    return 0 if all_pass else 1


if __name__ == "__main__":
    sys.exit(main())
