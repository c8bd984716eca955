"""Same-process A/B of two plugin builds on identical data (BENCHMARKS.md: "no slower" checks of a
kernel change): prefill 4096 queries x h = 128 / 16 and decode batch 128 x h = 128 / 64, eager
back-to-back launches of each build's prepared attend, the builds alternated (ABAB, then BABA),
and whether their outputs are bit-identical. `--decode-heads H...` replaces those shapes with decode
batch 128 at each h given (issue 34's "batch 128 no slower" at every h).

`--records 656` writes FlashMLA's 656-byte fp8_ds_mla records (bench/attend_reference.py's rule) and
times the 656 reader instead. `--small` times light calls the way an engine runs them: batch 1, 2, 4, 8
x h 64 / 128 (s_q 1), each build's call captured 20 times in one CUDA graph and the graphs replayed
between events, builds alternated (issue 54's small-batch regression).

Usage (GPU machine): PYTHONPATH=host_shims/python python3 bench/attend_ab.py OLD_PLUGIN.so NEW_PLUGIN.so
    [--decode-heads 16 32 64 128] [--records 368|656] [--small]
"""
import os
import sys
import argparse
import math
import statistics

import torch

import nvfp4_mla
from nvfp4_mla import _abi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attend_reference as ref  # noqa: E402  (bench/, beside this file)

D, DV, TOPK = 576, 512, 2048
KW = dict(layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN)
KW656 = dict(layout=_abi.LAYOUT_FP8_DS_MLA_656, scale_mode=_abi.SCALE_STATIC)
SMALL = tuple((f"graph b {b} x h {h}", b, h, 20) for h in (64, 128) for b in (1, 2, 4, 8))
SHAPES = (("prefill 4096 x h 128", 4096, 128, 3), ("prefill 4096 x h 16", 4096, 16, 3),
          ("decode 128 x h 128", 128, 128, 20), ("decode 128 x h 64", 128, 64, 20))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old_plugin")
    ap.add_argument("new_plugin")
    ap.add_argument("--decode-heads", type=int, nargs="+", help="decode batch 128 at these h instead")
    ap.add_argument("--records", type=int, choices=(368, 656), default=368)
    ap.add_argument("--small", action="store_true", help="light calls in CUDA graphs (batch 1-8, h 64 / 128)")
    args = ap.parse_args()
    shapes = tuple((f"decode 128 x h {h}", 128, h, 20) for h in args.decode_heads) if args.decode_heads else SHAPES
    shapes = SMALL if args.small else shapes
    rb, kw = (656, KW656) if args.records == 656 else (368, KW)
    ctxs = {name: nvfp4_mla.Context(nvfp4_mla.load(path), "cuda:0")
            for name, path in (("old", args.old_plugin), ("new", args.new_plugin))}
    n = 2 << 20  # tokens: random latents with log-normal token magnitudes, every record written
    gen = torch.Generator(device="cuda").manual_seed(5)
    cache = torch.empty(n // 64, 64, rb, dtype=torch.uint8, device="cuda")
    for first in range(0, n, 1 << 20):
        x = torch.randn(1 << 20, D, device="cuda", generator=gen)
        x = (x * torch.exp(0.5 * torch.randn(1 << 20, 1, device="cuda", generator=gen))).to(torch.bfloat16)
        if rb == 656:
            cache.view(n, 656)[first:first + (1 << 20)] = ref.fp8_ds_mla_records(x)
        else:
            ctxs["new"].write(x[:, :DV], x[:, DV:], torch.arange(first, first + (1 << 20), device="cuda"), cache, **kw)
    stream = torch.cuda.Stream() if args.small else torch.cuda.current_stream()
    for label, nq, h, launches in shapes:
        q = torch.randn(nq, h, D, device="cuda", generator=gen).to(torch.bfloat16)
        idx = torch.randint(0, n, (nq, TOPK), device="cuda", generator=gen, dtype=torch.int32)
        outs = {k: torch.empty(nq, h, DV, dtype=torch.bfloat16, device="cuda") for k in ctxs}
        calls = {k: ctx.prepare_attend(q, idx, cache, outs[k], sm_scale=1 / math.sqrt(D), stream=stream, **kw)
                 for k, ctx in ctxs.items()}
        run = {k: c.run for k, c in calls.items()}
        if args.small:  # each build's calls captured in one graph on a side stream, as engines replay them
            graphs = {}
            with torch.cuda.stream(stream):
                for k in ctxs:
                    calls[k].run()  # warm (the plugin builds its own launch state outside a capture)
                    stream.synchronize()
                    graphs[k] = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graphs[k], stream=stream):
                        for _ in range(launches):
                            calls[k].run()
            run = {k: g.replay for k, g in graphs.items()}
        times = {k: [] for k in ctxs}
        for rep in range(7):
            for k in ("old", "new") if rep % 2 == 0 else ("new", "old"):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record()
                    if args.small:
                        run[k]()
                    else:
                        for _ in range(launches):
                            run[k]()
                    end.record()
                end.synchronize()
                times[k].append(start.elapsed_time(end) * 1000 / launches)
        same = torch.equal(outs["old"].view(torch.int16), outs["new"].view(torch.int16))
        # A change that is not meant to be bit-identical (a reordered sum): how far apart, against
        # the old output's largest value (the tests' bounds are what decide; this is a first look).
        diff = (outs["old"].float() - outs["new"].float()).abs().max().item()
        scale = outs["old"].float().abs().max().item()
        line = " | ".join(f"{k} {statistics.median(t):9.1f} us [{min(t):.1f}-{max(t):.1f}]" for k, t in times.items())
        print(f"{label}: {line} | outputs bit-identical: {same}"
              + ("" if same else f" (max |old - new| {diff:.3g}, {diff / scale:.2e} of the largest value)"))


if __name__ == "__main__":
    main()
