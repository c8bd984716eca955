#!/usr/bin/env python3
"""The needle test at the attention level (issue 59), and the count of E4M3-subnormal group scales.

Per selected layer of the real GLM-5.2 profile (data/glm52-...json: 78 per-layer max |kv_c|, 0.022 to
5.19): N distractor tokens (latents Gaussian with a per-channel spread, log-normal sigma 0.5, and
log-normal token norms, sigma 1, scaled so that the layer's largest |value| is its max_abs; RoPE keys
likewise) and Q needles, each one token at a random slot, as long as the longest distractor; query q of needle n points along it,
scaled so that in the bf16 cache (float64 attention over the bf16 keys, q in bf16 as the plugin gets
it) the needle takes --weight of the softmax. Every cache format is then written and attended by the
plugin's REAL calls over all N slots; reported per layer and format: the needle's weight (exp of its
logit over its decoded record, minus attend's lse) and the output's relative error against bf16.

Subnormal count, every layer: --count-tokens tokens of the layer written in static 1.0 (uncalibrated),
static calibrated and per-token mode (rtn); per layer the share of group scales whose E4M3 code is
subnormal (1..7: k x 2^-9), of non-zero groups whose scale code is 0 (the group decodes to zeros) and of
tokens decoded to all zeros.

    NVFP4_MLA_PLUGIN=build/plugin needle.py --tokens 131072 --out needle.json          (CPU: ~1 min)
    ... --device cuda --tokens 1048576                                                  (GPU)
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "bench"), os.path.join(ROOT, "host_shims", "python")]

import torch  # noqa: E402

import attend_reference as ref  # noqa: E402
from nvfp4_mla import CacheFormat, Context, _abi, load, torch_ops  # noqa: E402

PROFILE = os.path.join(ROOT, "data", "glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json")
L368, L432, L656 = _abi.LAYOUT_FP8_ROPE_368, _abi.LAYOUT_BF16_ROPE_432, _abi.LAYOUT_FP8_DS_MLA_656
ST, PT = _abi.SCALE_STATIC, _abi.SCALE_PER_TOKEN
# name -> layout, scale mode, writer policy, static scale ("one" / "calibrated" / None)
MODES = {
    "fp8-656": (L656, ST, "rtn", "one"),
    "368 static 1.0 rtn": (L368, ST, "rtn", "one"),
    "368 static rtn": (L368, ST, "rtn", "calibrated"),
    "368 static mse": (L368, ST, "mse", "calibrated"),
    "368 per-token rtn": (L368, PT, "rtn", None),
    "368 per-token mse": (L368, PT, "mse", None),
    "432 static rtn": (L432, ST, "rtn", "calibrated"),
}
COUNT_MODES = ("368 static 1.0 rtn", "368 static rtn", "368 per-token rtn")


def latents(n, max_abs, gen, dev, chan=None):
    """[n, 576] bf16: latent and RoPE key of n tokens whose largest |latent value| is max_abs, and the
    per-channel spread drawn for them (`chan`: that of other tokens of the layer)."""
    chan = torch.exp(0.5 * torch.randn(512, generator=gen, device=dev)) if chan is None else chan
    norm = torch.exp(torch.randn(n, 1, generator=gen, device=dev))
    x = torch.randn(n, 512, generator=gen, device=dev) * chan * norm
    pe = torch.randn(n, 64, generator=gen, device=dev) * norm
    k = x.abs().max()
    return torch.cat([x, pe], dim=1).mul_(max_abs / k).to(torch.bfloat16), chan


def decode(rec, layout, outer):
    """One record's exact values [576] f32 (docs/record-format.md section 5); outer None: per-token."""
    if layout == L656:
        return ref.decode_656(rec[None])[0]
    r368 = rec[:368].clone()
    if layout == L432:  # its latent part is the 368 record's; its RoPE the bf16 values at [304, 432)
        r368[288:] = 0
    v = ref.decode_368(r368[None], outer)[0]
    if layout == L432:
        v[512:] = rec[304:432].contiguous().view(torch.bfloat16).float()
    return v


def write(name, ctx, keys, scale):
    layout, mode, policy, _ = MODES[name]
    n, rb = keys.shape[0], _abi.record_bytes(layout)
    cache = torch.zeros((n + 63) // 64, 64, rb, dtype=torch.uint8, device=keys.device)
    flat = cache.view(-1, rb)
    ops = torch_ops.bind(ctx, layout=layout, scale_mode=mode, writer_policy=policy)
    for s in range(0, n, 1 << 16):
        e = min(n, s + (1 << 16))
        if layout == L656:
            flat[s:e] = ref.fp8_ds_mla_records(keys[s:e])
        else:
            ops.write(keys[s:e, :512].contiguous(), keys[s:e, 512:].contiguous(),
                      torch.arange(s, e, dtype=torch.int64, device=keys.device), cache, outer_scale=scale)
    return ops, cache


def reference(q, keys, sm):
    """float64 attention over the bf16 keys: out [Q, 512], weights [Q, N]."""
    s = (q.double() @ keys.double().t()) * sm
    p = torch.softmax(s, dim=-1)
    return p @ keys[:, :512].double(), p


def needle_layer(layer, max_abs, a, ctx, cfg, dev):
    gen = torch.Generator(device=dev).manual_seed(a.seed * 1000 + layer)  # on the device: 1M tokens quickly
    keys, chan = latents(a.tokens, max_abs, gen, dev)
    pos = torch.randperm(a.tokens, generator=gen, device=dev)[: a.queries]
    # Needles: tokens of the layer's kind, each as long as the layer's longest token, so that no other
    # key projects further along it (its weight then grows with the query's length up to 1).
    needles = latents(a.queries, max_abs, gen, dev, chan)[0].float()
    longest = keys.float().norm(dim=1).max()
    keys[pos] = (needles * (longest / needles.norm(dim=1, keepdim=True))).to(torch.bfloat16)
    sm = 576 ** -0.5
    u = keys[pos].double()
    u = u / u.norm(dim=1, keepdim=True)
    dots = (u @ keys.double().t()) * sm  # [Q, N] logits per unit of query length
    lo = torch.full((a.queries,), 1e-3, dtype=torch.float64, device=dev)
    hi = torch.full((a.queries,), 1e9, dtype=torch.float64, device=dev)
    rows = torch.arange(a.queries, device=dev)
    for _ in range(80):  # bisection (geometric): the query length that gives the needle --weight in bf16
        mid = (lo * hi).sqrt()
        w = torch.softmax(dots * mid[:, None], dim=1)[rows, pos]
        lo, hi = torch.where(w < a.weight, mid, lo), torch.where(w < a.weight, hi, mid)
    q = (u * hi[:, None]).to(torch.bfloat16)
    o_ref, p_ref = reference(q.float(), keys, sm)
    out = {"max_abs": max_abs, "bf16": {"needle_weight": p_ref[rows, pos].tolist()}}
    slots = torch.arange(a.tokens, dtype=torch.int32, device=dev)[None].expand(a.queries, -1).contiguous()
    for name in MODES:
        scale = cfg.layer_scale(layer) if MODES[name][3] == "calibrated" else (1.0 if MODES[name][1] == ST else None)
        ops, cache = write(name, ctx, keys, scale)
        o, lse = ops.attend(q[:, None, :].contiguous(), slots, cache, sm_scale=sm, outer_scale=scale)
        flat = cache.view(a.tokens, -1)
        w = [math.exp(float(q[i].double() @ decode(flat[pos[i]], MODES[name][0], scale).double()) * sm
                      - float(lse[i, 0])) for i in range(a.queries)]
        err = ((o[:, 0].double() - o_ref).norm(dim=1) / o_ref.norm(dim=1)).tolist()
        out[name] = {"needle_weight": w, "out_rel_err": err}
        del cache
    return out


def count_layer(layer, max_abs, a, ctx, cfg, dev):
    keys, _ = latents(a.count_tokens, max_abs, torch.Generator(device=dev).manual_seed(a.seed * 1000 + 500 + layer), dev)
    groups_nonzero = (keys[:, :512].float().view(-1, 32, 16).abs().amax(-1) > 0)
    out = {}
    for name in COUNT_MODES:
        scale = cfg.layer_scale(layer) if MODES[name][3] == "calibrated" else (1.0 if MODES[name][1] == ST else None)
        _, cache = write(name, ctx, keys, scale)
        codes = cache.view(a.count_tokens, -1)[:, 256:288].long() & 0x7F
        sub = ((codes >= 1) & (codes <= 7)).double().mean()
        zero = ((codes == 0) & groups_nonzero).double().sum() / groups_nonzero.double().sum()
        dead = ((codes == 0).all(-1) & groups_nonzero.any(-1)).double().mean()
        out[name] = {"subnormal_share": float(sub), "zero_scale_share": float(zero), "zero_token_share": float(dead)}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=131072)
    p.add_argument("--queries", type=int, default=4)
    p.add_argument("--weight", type=float, default=0.5, help="the needle's softmax weight in the bf16 cache")
    p.add_argument("--layers", default="1,0,4,10,39,65", help="layers of the profile for the needle")
    p.add_argument("--count-tokens", type=int, default=4096)
    p.add_argument("--profile", default=PROFILE)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    dev = torch.device(a.device)
    plugin = load()
    ctx = Context(plugin, "cuda:0" if dev.type == "cuda" else "cpu")
    with open(a.profile) as f:
        max_abs = json.load(f)["max_abs"]
    cfg = CacheFormat(fp8_rope=True, scales_file=a.profile).open(plugin)  # the layer scales as a server has them
    start = time.time()
    res = {"tokens": a.tokens, "count_tokens": a.count_tokens, "queries": a.queries, "weight": a.weight, "seed": a.seed, "profile": a.profile,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "plugin": os.environ.get("NVFP4_MLA_PLUGIN", ""), "needle": {}, "count": {}}
    with torch.no_grad():
        for layer in [int(x) for x in a.layers.split(",") if x.strip()]:
            res["needle"][str(layer)] = needle_layer(layer, max_abs[layer], a, ctx, cfg, dev)
            print(f"layer {layer}: " + "; ".join(f"{m} {sum(v['needle_weight']) / a.queries:.3f}"
                                                 for m, v in res["needle"][str(layer)].items() if m != "max_abs"),
                  flush=True)
        if a.count_tokens:
            for layer, m in enumerate(max_abs):
                res["count"][str(layer)] = count_layer(layer, m, a, ctx, cfg, dev)
    cfg.close()
    res["seconds"] = round(time.time() - start, 1)
    import provenance
    res["provenance"] = provenance.collect(plugin, torch if dev.type == "cuda" else None)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"needle: {a.out} ({res['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
