"""The reference a timed attention output is judged against in the Python comparisons (issue 47),
in PyTorch on whatever device the tensors live on.

Reference: a float32 attention over the values of the records the timed call read, decoded outside
the kernel under test by the records' definition (docs/record-format.md section 5): 368-byte records
to their binary32 values (E2M1 x E4M3 group scale x the outer or per-token scale; E4M3 RoPE x r),
whose bf16 rounding must equal the plugin's own gather bit for bit (`matches_gather`: the decode is
held to the plugin's reader, and the reference to what attend computes with); 656-byte records to
E4M3 latent x its tile's f32 scale and bf16 RoPE; a bf16 cache (what FlashMLA's prefill reads) as
it is. Not the gather's bf16 rows themselves: their rounding is shared by a record's group (its
values are small multiples of one scale), so it does not average out: the CPU backend's exact
attention differs from a float32 attention over gathered rows by 1.6e-2 relative RMS in a row and
3e-3 in lse (tests/check_bench_scripts.py prints it), twice the bounds below.
TF32 is turned off for it. The judgement of a row is host_shims/common/attend_check.c's, written
again in PyTorch (the bounds are its defaults, tests/test_gpu_attend.c's): relative RMS of the row,
each element against itself and the row's largest |value|, lse; NaN never passes.
tests/check_bench_scripts.py shows on the CPU backend that a correct output passes with room and
that a 1% softmax-scale error, P rounded to 4 significant bits or lse off by 1e-4 fails.
"""
import math

import torch

D, DV = 576, 512
# attend_check_default_bounds (host_shims/common/attend_check.c)
BOUNDS = {"rel_rms": 1 / 128, "elem_rel": 2 / 128, "of_row_max": 1 / 128, "lse_rel": 1e-5}


def strict_float32():
    """float32 matmuls in float32 (no TF32) for the reference."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def fp8_ds_mla_records(x):
    """FlashMLA's quantiser: x [n, 576] bf16 -> [n, 656] uint8 (power-of-two tile scales)."""
    n = x.shape[0]
    lat = x[:, :DV].float().view(n, 4, 128)
    amax = lat.abs().amax(dim=2)
    scale = torch.exp2(torch.ceil(torch.log2(torch.clamp(amax / 448.0, min=1e-4))))
    codes = (lat / scale[:, :, None]).to(torch.float8_e4m3fn).view(torch.uint8).view(n, DV)
    rec = torch.empty(n, 656, dtype=torch.uint8, device=x.device)
    rec[:, :DV] = codes
    rec[:, DV:528] = scale.contiguous().view(torch.uint8).view(n, 16)
    rec[:, 528:] = x[:, DV:].contiguous().view(torch.uint8).view(n, 128)
    return rec


E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def decode_368(rec, outer=None):
    """[..., 368] uint8 records -> [..., 576] float32: their binary32 values (record-format.md section
    5). outer: the static scale s; None: per-token records (each record's s_t)."""
    shape = rec.shape[:-1]
    flat = rec.reshape(-1, 368)
    n = flat.shape[0]
    packed = flat[:, :256].long()
    codes = torch.stack([packed & 15, packed >> 4], dim=2).reshape(n, DV)
    table = torch.tensor(E2M1, dtype=torch.float32, device=rec.device)
    e2m1 = table[codes & 7] * torch.where(codes & 8 != 0, -1.0, 1.0)
    group = flat[:, 256:288].contiguous().view(torch.float8_e4m3fn).float().repeat_interleave(16, dim=1)
    r_st = flat[:, 288:296].contiguous().view(torch.float32)  # [n, 2]: r (RoPE scale), s_t
    scale = r_st[:, 1:2] if outer is None else torch.full_like(r_st[:, 1:2], float(outer))
    rope = flat[:, 304:368].contiguous().view(torch.float8_e4m3fn).float() * r_st[:, 0:1]
    return torch.cat([(e2m1 * group) * scale, rope], dim=1).view(*shape, D)


def matches_gather(rec, gathered, outer=None):
    """Whether bf16(decode_368(rec)) equals the plugin's gather of the same records, bit for bit."""
    mine = decode_368(rec, outer).to(torch.bfloat16).view(torch.int16)
    return bool(torch.equal(mine, gathered.reshape(mine.shape).view(torch.int16)))


def decode_656(rec):
    """[..., 656] uint8 records -> [..., 576] float32 keys (latent then RoPE) by the record's definition."""
    shape = rec.shape[:-1]
    flat = rec.reshape(-1, 656)
    n = flat.shape[0]
    codes = flat[:, :DV].contiguous().view(torch.float8_e4m3fn).float().view(n, 4, 128)
    scale = flat[:, DV:528].contiguous().view(torch.float32).view(n, 4, 1)
    rope = flat[:, 528:].contiguous().view(torch.bfloat16).float()
    return torch.cat([(codes * scale).view(n, DV), rope], dim=1).view(*shape, D)


def reference(q, idx, keys_of, sm_scale, chunk=16):
    """float32 attention: q [n, h, 576] (any float dtype), idx [n, topk] (negative: unused), keys_of(idx
    [c, topk] clamped >= 0) -> float32 keys [c, topk, 576]. Returns out [n, h, 512] and lse [n, h]
    (natural log; -inf and out 0 where no entry is valid), float32, in chunks of `chunk` queries."""
    n, h = q.shape[0], q.shape[1]
    out = torch.empty(n, h, DV, dtype=torch.float32, device=q.device)
    lse = torch.empty(n, h, dtype=torch.float32, device=q.device)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        ix = idx[s:e]
        keys = keys_of(ix.clamp_min(0))
        scores = torch.matmul(q[s:e].float(), keys.transpose(1, 2)) * sm_scale  # [c, h, topk]
        scores.masked_fill_((ix < 0)[:, None, :], float("-inf"))
        l = torch.logsumexp(scores, dim=-1)
        p = torch.exp(scores - torch.where(torch.isinf(l), torch.zeros_like(l), l)[..., None])
        out[s:e] = torch.matmul(p, keys[:, :, :DV])
        lse[s:e] = l
    return out, lse


def rows_of(x):
    return x.float().reshape(-1, DV)


def row_check(got, got_lse, want, want_lse, bounds=BOUNDS):
    """Every (query, head) row of got [.., 512] (bf16 or float) against want (float32: rounded to bf16
    first, as the CPU reference's output is), and got_lse against want_lse (natural log; None: not
    checked). attend_check_row's three conditions a row; the worst of each measure, the first
    failing row, PASS when none fails."""
    g = rows_of(got)
    w = rows_of(want.to(torch.bfloat16))
    d = (g - w).abs()
    w_norm = w.norm(dim=1)
    row_max = w.abs().amax(dim=1)
    rel_rms = torch.where(w_norm > 0, (g - w).norm(dim=1) / w_norm.clamp_min(1e-30),
                          torch.where((g - w).norm(dim=1) > 0, math.inf, 0.0))
    excess = (d - bounds["elem_rel"] * w.abs()).amax(dim=1).clamp_min(0)
    excess_of_max = torch.where(row_max > 0, excess / row_max.clamp_min(1e-30), torch.where(excess > 0, math.inf, 0.0))
    elem_ok = (d <= bounds["elem_rel"] * w.abs() + bounds["of_row_max"] * row_max[:, None]).all(dim=1)
    bad = ~(elem_ok & (rel_rms <= bounds["rel_rms"]) & torch.isfinite(g).all(dim=1))
    lse_err = torch.zeros_like(rel_rms)
    if got_lse is not None:
        gl, wl = got_lse.float().reshape(-1), want_lse.float().reshape(-1)
        empty = torch.isinf(wl) & (wl < 0)
        lse_err = torch.where(empty, 0.0, (gl - wl).abs() / wl.abs().clamp_min(1.0))
        lse_ok = torch.where(empty, torch.isinf(gl) & (gl < 0), lse_err <= bounds["lse_rel"])
        bad |= ~lse_ok
    failed = int(bad.sum())
    first = int(bad.nonzero()[0, 0]) if failed else -1
    return {"check": "FAIL" if failed else "PASS", "rows": g.shape[0], "failed_rows": failed,
            "worst_rel_rms": _worst(rel_rms), "worst_excess": _worst(excess_of_max), "worst_lse": _worst(lse_err),
            "first_failed_row": first, "bounds": dict(bounds)}


def _worst(x):
    """The largest value (NaN counts as the largest: it never passes)."""
    return math.inf if torch.isnan(x).any() else float(x.max()) if x.numel() else 0.0


def headroom(check):
    """The smallest bound / worst ratio over the three measures (how far from failing a PASS is)."""
    b = check["bounds"]
    ratios = [b["rel_rms"] / check["worst_rel_rms"] if check["worst_rel_rms"] else math.inf,
              b["of_row_max"] / check["worst_excess"] if check["worst_excess"] > 0 else math.inf,
              b["lse_rel"] / check["worst_lse"] if check["worst_lse"] else math.inf]
    return min(ratios)
