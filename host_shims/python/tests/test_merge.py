"""Context.merge and prepare_merge on the CPU backend (ABI 1.1): a float64 softmax over the union of
synthetic parts, attends over shares of a top-k row merged into the attend over the whole row, the
checks the shim makes, the plugin's refusals in its words, and the prepared forms (the one-shot bytes,
no Python allocation per run())."""
import re

import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN

from test_prepared import FakeTorch, traced_peak


def synthetic(parts, nq=3, h=2, keys=30, seed=0):
    """Partials of a softmax over `keys` random scores and values, split over `parts` (part 0 empty
    for query 1, query 2 without any key), and the float64 answer over the union."""
    rng = np.random.default_rng(seed)
    scores, values = rng.standard_normal((nq, h, keys)) * 3, rng.standard_normal((keys, 512))
    share = rng.integers(0, parts, (nq, keys))
    share[1][share[1] == 0] = parts - 1
    share[2] = -1
    po, pl = np.full((parts, nq, h, 512), np.nan, np.float32), np.full((parts, nq, h), -np.inf, np.float32)
    want, want_lse = np.zeros((nq, h, 512)), np.full((nq, h), -np.inf)
    for q in range(nq):
        for j in range(h):
            for p, sel in [(p, share[q] == p) for p in range(parts)] + [(None, share[q] >= 0)]:
                if not sel.any():
                    continue
                m = scores[q, j, sel].max()
                w = np.exp(scores[q, j, sel] - m)
                out, lse = w @ values[sel] / w.sum(), m + np.log(w.sum())
                if p is None:
                    want[q, j], want_lse[q, j] = out, lse
                else:
                    po[p, q, j], pl[p, q, j] = out, lse
    return po, pl, want, want_lse


@pytest.mark.parametrize("parts", [1, 2, 5, 8])
def test_merge_should_equal_a_float64_softmax_over_the_union(ctx, parts):
    po, pl, want, want_lse = synthetic(parts)
    for partials, err in ((po, 0.0), (nvfp4_mla.bf16_bits(po).reshape(po.shape), 2.0 ** -8)):
        out, lse = np.zeros((3, 2, 512), np.uint16), np.zeros((3, 2), np.float32)
        ctx.merge(partials, pl, out, lse=lse)
        got = nvfp4_mla.bf16_to_float32(out).reshape(out.shape)
        assert (np.abs(got - want) <= 2.0 ** -8 * np.abs(want) + err * np.nanmax(np.abs(po)) + 1e-7).all()
        assert np.allclose(lse[:2], want_lse[:2], rtol=1e-6, atol=1e-6)
        assert np.isneginf(lse[2]).all() and not got[2].any()


def test_merged_attends_over_shares_should_equal_one_attend_over_the_row(ctx):
    rng = np.random.default_rng(5)
    x = nvfp4_mla.bf16_bits(rng.standard_normal((64, 576)).astype(np.float32) * 0.3)
    cache = np.zeros((4, 16, 368), np.uint8)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    ctx.write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, **kw)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((2, 8, 576)).astype(np.float32)).reshape(2, 8, 576)
    row = rng.integers(-1, 64, (2, 32)).astype(np.int32)
    want, want_lse = np.zeros((2, 8, 512), np.uint16), np.zeros((2, 8), np.float32)
    ctx.attend(q, row, cache, want, lse=want_lse, sm_scale=0.05, **kw)
    ranks = 4  # tokens round-robin over four ranks: each attends over the entries it holds
    po, pl = np.zeros((ranks, 2, 8, 512), np.uint16), np.zeros((ranks, 2, 8), np.float32)
    for r in range(ranks):
        ctx.attend(q, np.where(row % ranks == r, row, -1), cache, po[r], lse=pl[r], sm_scale=0.05, **kw)
    out, lse = np.zeros_like(want), np.zeros_like(want_lse)
    ctx.merge(po, pl, out, lse=lse)
    a, b = nvfp4_mla.bf16_to_float32(out), nvfp4_mla.bf16_to_float32(want)
    assert (np.abs(a - b) <= 2.0 ** -7 * np.abs(b) + 2.0 ** -8 * np.abs(nvfp4_mla.bf16_to_float32(po)).max()).all()
    assert np.allclose(lse, want_lse, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case, error, kind", [
    ("f16 partials", "partial_out: dtype f16, expected bf16 or f32", nvfp4_mla.ArrayError),
    ("short lse", "partial_lse: shape[0] is 2, expected 3", nvfp4_mla.ArrayError),
    ("out of other heads", "out: shape[1] is 3, expected 2", nvfp4_mla.ArrayError),
    ("stream on cpu", "stream: must be None on a CPU context", ValueError),
    ("in place", "merge: out overlaps partial_out", nvfp4_mla.InvalidArgument),
    ("nan lse", "merge: partial_lse[0, 1, 1] is nan; an attention's lse is finite, or -inf", nvfp4_mla.InvalidArgument),
])
def test_merge_should_check_before_calling_and_raise_the_plugins_words(ctx, case, error, kind):
    po, pl, _, _ = synthetic(3)
    out, lse, kwargs = np.zeros((3, 2, 512), np.uint16), np.zeros((3, 2), np.float32), {}
    if case == "f16 partials":
        po = po.astype(np.float16)
    elif case == "short lse":
        pl = pl[:2]
    elif case == "out of other heads":
        out = np.zeros((3, 3, 512), np.uint16)
    elif case == "stream on cpu":
        kwargs["stream"] = 7
    elif case == "in place":
        out = po.view(np.uint16)[0, :, :, :512]
    else:
        pl[0, 1, 1] = np.nan
    with pytest.raises(kind, match=re.escape(error)):
        ctx.merge(po, pl, out, lse=lse, **kwargs)


def test_prepared_merge_should_give_the_one_shot_outputs_without_allocating(ctx):
    po, pl, _, _ = synthetic(4, nq=5)
    want, want_lse = np.zeros((5, 2, 512), np.uint16), np.zeros((5, 2), np.float32)
    ctx.merge(po, pl, want, lse=want_lse)
    out, lse = np.zeros_like(want), np.zeros_like(want_lse)
    m = ctx.prepare_merge(po, pl, out, lse=lse)
    m.run(2)  # the first two queries only
    assert bytes(out[:2]) == bytes(want[:2]) and not out[2:].any() and bytes(lse[:2]) == bytes(want_lse[:2])
    m.run()
    assert bytes(out) == bytes(want) and bytes(lse) == bytes(want_lse)
    out2, lse2 = np.zeros((3, 2, 512), np.uint16), np.zeros((3, 2), np.float32)
    m(po[:, 2:], pl[:, 2:], out2, lse2)  # new arrays: queries 2..4, the bound P
    assert bytes(out2) == bytes(want[2:]) and bytes(lse2) == bytes(want_lse[2:])
    with pytest.raises(nvfp4_mla.ArrayError, match="pass lse exactly when"):
        m(po, pl, out)
    assert traced_peak(m.run) == 0


def test_prepared_merge_should_read_torch_tensors_by_their_queries_dimension(ctx):
    po, pl, _, _ = synthetic(2, nq=4)
    want, out = np.zeros((4, 2, 512), np.uint16), np.zeros((4, 2, 512), np.uint16)
    ctx.merge(po, pl, want)
    m = ctx.prepare_merge(FakeTorch(po[:, :1]), FakeTorch(pl[:, :1]), FakeTorch(out[:1]))
    m(FakeTorch(po), FakeTorch(pl), FakeTorch(out))
    assert bytes(out) == bytes(want)
