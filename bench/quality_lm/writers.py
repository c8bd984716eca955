"""Writer policies emulated in PyTorch (issue 59): 368-byte per-token records built by the arithmetic
of docs/record-format.md section 4, with the group-scale code picked from a candidate list, so that a
policy the plugin does not have yet can be measured through the plugin's REAL readers (attend reads
these bytes like any record). `rtn` (one candidate) reproduces the plugin's rtn writer byte for byte
and `mse` (section 4b's six) nearly so (its squared-error sums are not added in index order here, so
a near-tie may pick another code): tests/check_quality_lm.py holds both against the plugin's writes,
which is what makes `4over6` (candidates c6 and c4: the better of scaling the group maximum to 6 or
to 4: the "four over six" adaptive block scaling proposed for NVFP4) a measurement of that policy and not of this file.

Also the Hadamard rotation of the latent (an experiment: it changes what a record means, so a reader
must rotate the query's latent part and the output back): H is the 512 x 512 Sylvester matrix / sqrt(512),
orthonormal and symmetric, so q.k = (qH).(kH) and o = (sum p kH) H.
"""
import torch

K6 = torch.tensor(1 / 6, dtype=torch.float32)
K2688 = torch.tensor(1 / 2688, dtype=torch.float32)
K448 = torch.tensor(1 / 448, dtype=torch.float32)
FLT_MIN = torch.finfo(torch.float32).tiny
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# (threshold multiple, strict) in order: the magnitude index is the number passed (section 4 step 4).
THRESHOLDS = ((0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True), (3.5, False), (5.0, True))
POLICIES = ("rtn", "4over6", "mse")


def e4m3_code(v):
    """E4M3_RN_SATFINITE of v >= 0 (f32): the magnitude code, int64."""
    return torch.clamp(v, max=448.0).to(torch.float8_e4m3fn).view(torch.uint8).long()


def e4m3_value(code):
    """The value of magnitude codes 0..0x7E (int64 tensor) as f32."""
    table = torch.arange(128, dtype=torch.uint8, device=code.device).view(torch.float8_e4m3fn).float()
    return table[code.clamp(0, 0x7E)]


def magnitude_index(ay, d):
    """Section 4 step 4's E2M1 magnitude index of |y| for scale d (broadcast), by the exact thresholds."""
    k = None
    for m, strict in THRESHOLDS:
        t = torch.tensor(m, dtype=torch.float32, device=ay.device) * d
        passed = ((ay > t) if strict else (ay >= t)).long()
        k = passed if k is None else k + passed
    return k


def candidates(a_g, policy):
    """[..., C] candidate group-scale codes (-1: skipped) for group maxima a_g, in section 4b's order."""
    c6 = e4m3_code(a_g * K6.to(a_g.device))
    if policy == "rtn":
        return c6[..., None]
    c4 = e4m3_code(a_g * 0.25)
    if policy == "4over6":
        cand = torch.stack([c6, c4], dim=-1)
    elif policy == "mse":
        cand = torch.stack([c6, c6 - 1, c6 + 1, c4 - 1, c4, c4 + 1], dim=-1)
    else:
        raise ValueError(f"policy {policy!r}: expected one of {', '.join(POLICIES)}")
    return torch.where((cand >= 0) & (cand <= 0x7E), cand, torch.full_like(cand, -1))


def pick_codes(y, policy):
    """y [N, 32, 16] f32 -> chosen scale codes [N, 32]: the candidate of least squared error, the
    earlier one on a tie (so a group no candidate improves keeps rtn's code)."""
    a_g = y.abs().amax(-1)
    cand = candidates(a_g, policy)
    if cand.shape[-1] == 1:
        return cand[..., 0]
    d = e4m3_value(cand)  # [N, 32, C]
    ay = y.abs()[..., None, :]  # [N, 32, 1, 16]
    k = magnitude_index(ay, d[..., None])
    m = torch.tensor(E2M1, dtype=torch.float32, device=y.device)[k]
    err = ((ay - m * d[..., None]) ** 2).sum(-1)  # [N, 32, C]
    err = torch.where(cand < 0, torch.full_like(err, float("inf")), err)
    return torch.gather(cand, -1, err.argmin(-1, keepdim=True))[..., 0]  # argmin: the first minimum


def encode_368(kv_c, k_pe, policy="rtn"):
    """kv_c [N, 512], k_pe [N, 64] bf16 -> [N, 368] uint8 per-token records (finite inputs)."""
    n, dev = kv_c.shape[0], kv_c.device
    x, pe = kv_c.float(), k_pe.float()
    s_t = x.abs().amax(-1) * K2688.to(dev)
    zero = s_t < FLT_MIN
    s_t = torch.where(zero, torch.zeros_like(s_t), s_t)
    inv = torch.ones_like(s_t) / torch.where(zero, torch.ones_like(s_t), s_t)
    y = (x * inv[:, None]).view(n, 32, 16)
    code = pick_codes(y, policy)
    code = torch.where(zero[:, None], torch.zeros_like(code), code)
    d = e4m3_value(code)[..., None]
    q = magnitude_index(y.abs(), d) | (torch.signbit(y).long() << 3)
    q = torch.where(d == 0, torch.zeros_like(q), q).view(n, 512)
    rec = torch.zeros(n, 368, dtype=torch.uint8, device=dev)
    rec[:, :256] = (q[:, 0::2] | (q[:, 1::2] << 4)).to(torch.uint8)
    rec[:, 256:288] = code.to(torch.uint8)
    r = pe.abs().amax(-1) * K448.to(dev)
    rzero = r < FLT_MIN
    r = torch.where(rzero, torch.zeros_like(r), r)
    rinv = torch.ones_like(r) / torch.where(rzero, torch.ones_like(r), r)
    rc = torch.clamp(pe * rinv[:, None], -448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    rec[:, 304:368] = torch.where(rzero[:, None], torch.zeros_like(rc), rc)
    rec[:, 288:296] = torch.stack([r, s_t], dim=1).contiguous().view(torch.uint8)
    return rec


def hadamard(n=512, device="cpu"):
    """The orthonormal Sylvester Hadamard matrix of size n (a power of two), f32."""
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / h.shape[0] ** 0.5).to(device)
