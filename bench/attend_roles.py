"""Where each role of the attention kernel waits: Nsight Compute's warp-stall samples of one kernel, by
the register region each warpgroup runs in (the kernel's setmaxnreg points split it: the value
warpgroup, the score warpgroup, the producers of the wide kind), with each region's main stall reasons
and its top instructions (issue 46: "what bounds attend"; docs/performance-notes.md).

Two modes (GPU machine; PYTHONPATH=host_shims/python):
  drive PLUGIN [H]   one decode call, batch 128 x h H (default 128), 368-byte per-token records, top-k
                     2048 over 1 M written tokens, run twice: the profiled launch is the second
                     (ncu -s 1 -c 1), e.g.
                       ncu --clock-control none -k regex:nvfp4_attend_kernel -s 1 -c 1 \\
                           --section WarpStateStats --section SourceCounters -o prof \\
                           python3 bench/attend_roles.py drive build-gpu/plugin/libnvfp4_mla.so 128
                       ncu -i prof.ncu-rep --page source --csv --print-source sass > src.csv
  summary CSV [TOP]  the regions of that source page (TOP instructions each, default 12).
"""
import collections
import csv
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # flashmla_compare, beside this file


def drive(plugin, h):
    """The profiled call: flashmla_compare's data (make_tokens, its 368-byte per-token layout)."""
    import torch

    import flashmla_compare as fc
    import nvfp4_mla

    n = 1 << 20
    ctx = nvfp4_mla.Context(nvfp4_mla.load(plugin), "cuda:0")
    gen = torch.Generator(device="cuda").manual_seed(5)
    cache = torch.empty(n // 64, 64, 368, dtype=torch.uint8, device="cuda")

    def fill(first, x):
        slots = torch.arange(first, first + x.shape[0], device="cuda")
        ctx.write(x[:, :fc.DV], x[:, fc.DV:], slots, cache, **fc.L368)

    fc.make_tokens(n, gen, fill)
    q = torch.randn(128, h, fc.D, device="cuda", generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, n, (128, fc.TOPK), device="cuda", generator=gen, dtype=torch.int32)
    out = torch.empty(128, h, fc.DV, dtype=torch.bfloat16, device="cuda")
    call = ctx.prepare_attend(q, idx, cache, out, sm_scale=1 / math.sqrt(fc.D), stream=fc.current_stream(),
                              **fc.L368)
    call.run()
    call.run()
    fc.sync()
    print("ran; largest output", out.float().abs().max().item())


def summary(path, top):
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples = "Warp Stall Sampling (All Samples)"

    def num(r, h):
        try:
            return float(r[ix[h]])
        except (ValueError, IndexError):
            return 0.0

    regions, name, start = [], "prologue", 0
    for i, r in enumerate(data):
        if "SETMAXREG" in r[1]:
            regions.append((name, start, i))
            name, start = f"registers {int(re.findall(r'0x[0-9a-fA-F]+', r[1])[-1], 16)}", i
    regions.append((name, start, len(data)))
    total = sum(num(r, samples) for r in data)
    print(f"{path}: {total:.0f} samples")
    for name, a, b in regions:
        seg = data[a:b]
        s = sum(num(r, samples) for r in seg)
        if s < 0.01 * total:
            continue
        agg = collections.Counter()
        for r in seg:
            for h in stalls:
                agg[h] += num(r, h)
        reasons = ", ".join(f"{k[6:]} {100 * v / s:.0f}%" for k, v in agg.most_common(5))
        print(f"== {name} (SASS lines {a}-{b}): {100 * s / total:.1f}% of samples; {reasons}")
        for i in sorted(sorted(range(a, b), key=lambda i: -num(data[i], samples))[:top]):
            r = data[i]
            reason = max(stalls, key=lambda h: num(r, h))[6:]
            print(f"   {i:5d} {100 * num(r, samples) / s:5.1f}% {reason:14s} {r[1].strip()[:80]}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "drive":
        drive(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 128)
    elif len(sys.argv) >= 3 and sys.argv[1] == "summary":
        summary(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 12)
    else:
        sys.exit(__doc__)
