"""nvfp4_mla.vllm_plugin.kernels: the NVFP4_MLA_SPARSE Impl's bodies on vLLM-shaped tensors, without vLLM.

A mixed batch as vLLM's sparse MLA layer hands it over: decode rows, MTP rows (two queries of one
request), prefill rows, top-k rows of physical slots with -1 padding and per-row valid counts, a
row with no valid entry; the step's tokens written first through the cache update (padding slots
-1, a k_pe of [T, 1, 64], the cache viewed as float8_e4m3fn, pages of two layers interleaved so
that the block stride is two pages). Checked against a float32 attention over the same records
(the plugin's own gather, upcast: kernels.reference_mqa) and, for the writer, against the plugin's
write on a contiguous copy. On CUDA the step (write + attend) is also captured in a CUDA graph and
replayed with new data: the same bytes as the eager calls.

Runs on the CPU backend wherever PyTorch is installed (the vLLM contract suite's environment, the
GPU machine) and on CUDA where a device is present; skips without PyTorch (CI's shim suite).

GPU machine: NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
             python3 -m pytest -q -rs host_shims/python/tests/test_vllm_kernels.py
"""
import os

import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_BF16_ROPE_432, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC

torch = pytest.importorskip("torch", reason="PyTorch is not installed here (CI's shim suite): the vLLM plugin's "
                                            "kernels run where it is (the contract environment, the GPU machine)")
from nvfp4_mla import calls, torch_ops  # noqa: E402
from nvfp4_mla.vllm_plugin import kernels  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA, reason="no CUDA device"))]
FORMATS = [(LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, None), (LAYOUT_BF16_ROPE_432, SCALE_STATIC, 0.004)]
BLOCK, BLOCKS, TOPK = 64, 24, 256
SM = 0.1


@pytest.fixture(scope="module")
def plugin():
    """The build's plugin (NVFP4_MLA_PLUGIN_PATH, as the shim suite sets it), else NVFP4_MLA_PLUGIN."""
    path = os.environ.get("NVFP4_MLA_PLUGIN_PATH")
    return nvfp4_mla.load(path) if path else nvfp4_mla.load()


def ops_for(plugin, device, layout, mode):
    return kernels.bound_ops(plugin, device, layout, mode)


class Paged:
    """One layer's cache as vLLM lays it out when another layer's pages sit between its blocks: a
    [BLOCKS, 2, BLOCK, record] buffer, this layer's blocks the [:, 0] pages (block stride two pages)."""

    def __init__(self, record, device):
        self.buffer = torch.zeros(BLOCKS, 2, BLOCK, record, dtype=torch.uint8, device=device)
        self.cache = self.buffer[:, 0]
        self.stride_rows = 2 * BLOCK  # vLLM's block_stride_rows for this cache

    def row(self, slot):
        """The physical row vLLM's top-k conversion gives the token at logical slot `slot`."""
        return (slot // BLOCK) * self.stride_rows + slot % BLOCK


class Batch:
    """A mixed step: requests as (query tokens, context tokens); the step's tokens are the last
    query-many of each context. Context slots are spread over the blocks, a block table per request."""

    def __init__(self, paged, heads, device, seed, requests=((1, 300), (1, 40), (2, 500), (2, 90), (7, 7))):
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(BLOCKS, generator=g)
        self.slot_of, first = [], 0
        for q_len, ctx in requests:  # logical slots of each request's tokens, in position order
            blocks = order[first:first + (ctx + BLOCK - 1) // BLOCK]
            first += len(blocks)
            pos = torch.arange(ctx)
            self.slot_of.append(blocks[pos // BLOCK] * BLOCK + pos % BLOCK)
        self.requests, self.paged, self.device = requests, paged, device
        total = sum(ctx for _, ctx in requests)
        self.history = self._bf16(torch.randn(total, 576, generator=g) * torch.exp(0.5 * torch.randn(total, 1,
                                                                                                     generator=g)))
        self.history_slots = torch.cat(self.slot_of).long()
        n = sum(q for q, _ in requests)
        self.q = self._bf16(torch.randn(n, heads, 576, generator=g))
        topk = torch.full((n, TOPK), -1, dtype=torch.int32)
        valid = torch.zeros(n, dtype=torch.int32)
        row = 0
        for r, (q_len, ctx) in enumerate(requests):
            for i in range(q_len):  # causal: query i of the step sees positions < ctx - q_len + i + 1
                visible = ctx - q_len + i + 1
                k = min(visible, TOPK - 8)  # 8 entries of -1 padding at least
                chosen = torch.randperm(visible, generator=g)[:k]
                topk[row, :k] = torch.tensor([paged.row(int(s)) for s in self.slot_of[r][chosen]], dtype=torch.int32)
                valid[row] = k
                row += 1
        topk[-1, :] = -1  # a row with no valid entry: zeros and lse -inf
        valid[-1] = 0
        self.topk, self.valid = topk.to(device), valid.to(device)
        # The step's new tokens: the last q_len positions of each request (written by the cache update).
        self.step_slots = torch.cat([self.slot_of[r][ctx - q:] for r, (q, ctx) in enumerate(requests)]).long()
        self.step_index = torch.cat([sum(c for _, c in requests[:r]) + torch.arange(ctx - q, ctx)
                                     for r, (q, ctx) in enumerate(requests)])

    def _bf16(self, x):
        return x.to(torch.bfloat16).to(self.device)


def write_history(ops, batch, outer_scale):
    """Every token but the step's, written directly (the cache before the step)."""
    keep = torch.ones(batch.history.shape[0], dtype=torch.bool)
    keep[batch.step_index] = False
    x, slots = batch.history[keep.to(batch.device)], batch.history_slots[keep].to(batch.device)
    ops.write(x[:, :512], x[:, 512:], slots, batch.paged.cache, outer_scale=outer_scale)


def step_tokens(batch, pad):
    """The step's tokens as vLLM passes them: kv_c_normed [T, 512], k_pe [T, 1, 64] and slot_mapping,
    plus `pad` padding tokens (slot -1) at the end, as a captured batch carries them."""
    x = batch.history[batch.step_index.to(batch.device)]
    x = torch.cat([x, torch.randn(pad, 576, device=batch.device).to(torch.bfloat16)])
    slots = torch.cat([batch.step_slots, torch.full((pad,), -1, dtype=torch.long)]).to(batch.device)
    return x[:, :512].contiguous(), x[:, 512:].unsqueeze(1).contiguous(), slots


# Worst row's relative RMS error and max error over the row's max: attend reads the records' binary32
# values, the reference their bf16 rounding (gather), which moves rows by up to a few 1e-2 on data
# like this (up to 7.2e-2 over 65536 rows, bench/vllm_decode_step.py says); a wrong slot, a
# wrong scale or a lost entry moves them by O(1).
BOUNDS = (5e-2, 5e-2)


def check_against_reference(ops, batch, out, lse, outer_scale):
    ref_out, ref_lse = kernels.reference_mqa(ops, (batch.q[..., :512], batch.q[..., 512:]), batch.paged.cache,
                                             batch.topk, batch.valid, sm_scale=SM, outer_scale=outer_scale)
    live = batch.valid > 0
    got, want = out[live].float(), ref_out[live]
    rel_rms = ((got - want).norm(dim=-1) / want.norm(dim=-1).clamp_min(1e-30)).max().item()
    rel_max = ((got - want).abs().amax(dim=-1) / want.abs().amax(dim=-1).clamp_min(1e-30)).max().item()
    assert rel_rms < BOUNDS[0] and rel_max < BOUNDS[1], f"out: worst row relative rms {rel_rms:.2e}, max {rel_max:.2e}"
    assert torch.allclose(lse[live], ref_lse[live], rtol=5e-3, atol=5e-2), (lse[live] - ref_lse[live]).abs().max()
    assert torch.all(out[~live] == 0) and torch.all(torch.isneginf(lse[~live])), "a row without entries"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout, mode, scale", FORMATS)
@pytest.mark.parametrize("heads", [16, 128])
def test_mixed_batch_should_write_and_attend_like_a_float32_attention_over_the_records(plugin, device, layout, mode,
                                                                                      scale, heads):
    ops = ops_for(plugin, device, layout, mode)
    paged = Paged(nvfp4_mla._abi.record_bytes(layout), device)
    batch = Batch(paged, heads, device, seed=heads + layout)
    write_history(ops, batch, scale)
    kv_c, k_pe, slots = step_tokens(batch, pad=5)
    kernels.cache_update(ops, kv_c, k_pe, paged.cache.view(torch.float8_e4m3fn), slots, outer_scale=scale)
    assert torch.all(paged.buffer[:, 1] == 0), "the other layer's pages must stay untouched"
    # The writer on the interleaved cache wrote what it writes on a contiguous one.
    flat = torch.zeros(BLOCKS, BLOCK, paged.cache.shape[-1], dtype=torch.uint8, device=device)
    ops.write(batch.history[:, :512], batch.history[:, 512:], batch.history_slots.to(device), flat, outer_scale=scale)
    assert torch.equal(paged.cache, flat)
    out, lse = kernels.forward_mqa(ops, (batch.q[..., :512], batch.q[..., 512:]), paged.cache, batch.topk,
                                   batch.valid, sm_scale=SM, outer_scale=scale)
    assert out.shape == (batch.q.shape[0], heads, 512) and out.dtype == torch.bfloat16
    assert lse.shape == (batch.q.shape[0], heads) and lse.dtype == torch.float32
    check_against_reference(ops, batch, out, lse, scale)
    packed, packed_lse = kernels.forward_mqa(ops, batch.q, paged.cache, batch.topk, batch.valid, sm_scale=SM,
                                             outer_scale=scale)
    assert torch.equal(packed.view(torch.int16), out.view(torch.int16)) and torch.equal(packed_lse, lse)


def test_valid_counts_should_end_each_row(plugin):
    """vLLM's conversion leaves the valid entries in front and counts them: entries past a row's
    count have no weight even when they name a slot (as vLLM's FA3 and trtllm-gen kernels read it)."""
    ops = ops_for(plugin, "cpu", LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN)
    paged = Paged(368, "cpu")
    batch = Batch(paged, 16, "cpu", seed=5)
    write_history(ops, batch, None)
    kv_c, k_pe, slots = step_tokens(batch, pad=0)
    kernels.cache_update(ops, kv_c, k_pe, paged.cache, slots)
    short = batch.valid.clone()
    short[:3] = 4
    out, lse = kernels.forward_mqa(ops, batch.q, paged.cache, batch.topk, short, sm_scale=SM)
    cut = batch.topk.clone()
    cut[:3, 4:] = -1
    want, want_lse = kernels.forward_mqa(ops, batch.q, paged.cache, cut, None, sm_scale=SM)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16)) and torch.equal(lse, want_lse)


def test_a_cache_whose_strides_are_not_whole_records_should_be_refused():
    odd = torch.zeros(4, 64 * 368 + 8, dtype=torch.uint8)[:, : 64 * 368].view(4, 64, 368)
    with pytest.raises(ValueError, match="not whole records"):
        kernels.flat_rows(odd)
    with pytest.raises(ValueError, match="not a byte cache"):
        kernels.flat_rows(torch.zeros(4, 64, 368, dtype=torch.bfloat16))
    rows = kernels.flat_rows(Paged(368, "cpu").cache)
    assert rows.shape == ((BLOCKS - 1) * 2 * BLOCK + BLOCK, 1, 368) and rows.stride() == (368, 368, 1)


def refusal(call):
    with pytest.raises(ValueError) as exc:
        call()
    return str(exc.value)


def test_forward_mqa_should_refuse_mis_shaped_queries_naming_them(plugin):
    """bad-inputs-4 N14: a 448 + 128 split concatenated to 576 columns and ran; a 3-part tuple gave
    "too many values to unpack". Each part is checked by name before any concatenation."""
    ops = ops_for(plugin, "cpu", LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN)
    cache, topk = torch.zeros(1, 64, 368, dtype=torch.uint8), torch.zeros(2, 8, dtype=torch.int32)
    q = torch.randn(2, 16, 576).to(torch.bfloat16)
    pair = "expected (q_nope [n, h, 512], q_pe [n, h, 64]) or one q [n, h, 576]"
    cases = [
        ((q[..., :448], q[..., 448:]), "q_nope: shape (2, 16, 448), expected [n, h, 512]"),
        ([q[..., :512], q[..., 512:], q[..., :1]], "q: a list of 3 parts, " + pair),
        ((q[..., :512],), "q: a tuple of 1 parts, " + pair),
        ((q[..., :512], q[:1, :, 512:]), "q_pe: shape (1, 16, 64) torch.bfloat16, expected q_nope's [n, h] = [2, 16]"),
        ((q[..., :512], q[..., 512:].float()), "q_pe: shape (2, 16, 64) torch.float32, expected q_nope's [n, h]"),
        ((q[..., :512], q[..., 512:, None]), "q_pe: shape (2, 16, 64, 1), expected [n, h, 64]"),
        ((q[..., :512], None), "q_pe: a NoneType, expected a tensor [n, h, 64]"),
        (q[..., :575], "q: shape (2, 16, 575), expected [n, h, 576]"),
        (q[0], "q: shape (16, 576), expected [n, h, 576]"),
    ]
    for bad, words in cases:
        assert refusal(lambda: kernels.forward_mqa(ops, bad, cache, topk, None, sm_scale=SM)).startswith(words)
    rows = [(topk[:1], None, "topk: shape (1, 8) torch.int32, expected [n, K] torch.int32 with n = 2 (q's rows)"),
            (topk.long(), None, "topk: shape (2, 8) torch.int64, expected [n, K] torch.int32"),
            (topk[0], None, "topk: shape (8,) torch.int32, expected [n, K]"),
            (topk, torch.zeros(3, dtype=torch.int32), "valid_counts: shape (3,) torch.int32, expected [n] torch.int32"),
            (topk, [8, 8], "valid_counts: a list, expected [n] torch.int32 with n = 2")]
    for rows_topk, valid, words in rows:
        assert refusal(lambda: kernels.forward_mqa(ops, q, cache, rows_topk, valid, sm_scale=SM)).startswith(words)
    out, _ = kernels.forward_mqa(ops, (q[..., :512], q[..., 512:]), cache, topk, None, sm_scale=SM)
    assert out.shape == (2, 16, 512)


def test_cache_update_should_refuse_mis_shaped_rope_keys_naming_them(plugin):
    """bad-inputs-4 N14: k_pe [T, 2, 32] was reshaped to [T, 64] and written; [T, 1, 63] failed with
    torch's "shape '[8, 64]' is invalid for input of size 504", naming no argument."""
    ops = ops_for(plugin, "cpu", LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN)
    cache = torch.zeros(1, 64, 368, dtype=torch.uint8)
    kv_c, slots = torch.randn(8, 512).to(torch.bfloat16), torch.arange(8)
    expected = "expected [T, 64] or [T, 1, 64]"
    for shape in ((8, 2, 32), (8, 1, 63), (8, 128), (8, 64, 1), (512,)):
        k_pe = torch.zeros(shape, dtype=torch.bfloat16)
        assert refusal(lambda: kernels.cache_update(ops, kv_c, k_pe, cache, slots)) == \
            f"k_pe: shape {shape}, {expected}"
    assert refusal(lambda: kernels.cache_update(ops, kv_c, torch.zeros(6, 1, 64, dtype=torch.bfloat16), cache,
                                                slots)) == "k_pe: 6 tokens, the slot mapping has 8"
    assert int(cache.count_nonzero()) == 0
    kernels.cache_update(ops, kv_c, torch.ones(8, 1, 64, dtype=torch.bfloat16), cache, slots)
    assert int(cache.count_nonzero()) > 0


def test_bound_ops_should_refuse_a_device_the_plugin_cannot_run_on(plugin):
    """bad-inputs-4 N14: bound_ops(plugin, torch.device("meta"), ...) bound a CPU context."""
    assert refusal(lambda: kernels.bound_ops(plugin, torch.device("meta"), LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN)) == \
        "device 'meta': the plugin runs on 'cpu' or 'cuda' devices"


def test_plan_step_should_ask_the_plugin_for_the_steps_workspace(plugin):
    ops = ops_for(plugin, "cpu", LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN)
    assert kernels.plan_step(ops, 0, 16, TOPK, 368) == 0
    # The CPU backend asks for no scratch (attend_cpu.c: it allocates its own row buffer per call), so
    # the exact answer for any shape is 0, and nothing is kept.
    assert kernels.plan_step(ops, 8, 16, TOPK, 368) == 0
    assert ops.context.workspace.kept(None) is None
    with pytest.raises(nvfp4_mla.InvalidArgument, match="h = shape\\[1\\] is 129"):
        kernels.plan_step(ops, 8, 129, TOPK, 368)


def test_plan_step_should_grow_the_kept_workspace_once_per_shape_outside_capture(plugin, monkeypatch):
    """The rule on a context whose plugin asks for scratch (the CUDA backend's case, the answer stood in
    for on the CPU context): asked once per shape, the kept workspace of the stream grown to it, never
    shrunk."""
    ctx = nvfp4_mla.Context(plugin, "cpu")
    ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    asked = []
    monkeypatch.setattr(ctx, "attend_workspace_bytes",
                        lambda args: asked.append(args.q.shape[0]) or 4096 * args.q.shape[0])
    assert kernels.plan_step(ops, 2, 16, TOPK, 368) == 8192
    kept = ctx.workspace.kept(None)
    assert kept.dtype == torch.uint8 and kept.device.type == "cpu" and kept.shape == (8192,)
    assert kernels.plan_step(ops, 2, 16, TOPK, 368) == 8192 and asked == [2]  # once per shape
    assert kernels.plan_step(ops, 1, 16, TOPK, 368) == 4096 and ctx.workspace.kept(None) is kept  # enough already
    assert kernels.plan_step(ops, 3, 16, TOPK, 368) == 12288 and ctx.workspace.kept(None).shape == (12288,)
    assert asked == [2, 1, 3]
    ctx.close()


def split_workspace_sizes(n_q, heads, topk):
    """Every size the split-K workspace of kernels/attend/attend_plan.h can have for these shapes: partial
    rows [splits, n_q, h, 512] bf16, their log-sum-exp [splits, n_q, h] f32, 8-byte aligned, then one
    8-byte arrival counter a query and head group (splits 2..topk, groups 1..h)."""
    sizes = set()
    for splits in range(2, topk + 1):
        rows = splits * n_q * heads
        counters = (rows * 512 * 2 + rows * 4 + 7) // 8 * 8
        sizes.update(counters + n_q * groups * 8 for groups in range(1, heads + 1))
    return sizes


def check_plan(ops, plan, q, topk, valid, cache, layout, mode, scale):
    """plan_step's bytes on CUDA: what the plugin says for the step's real tensors (its placeholders
    change no answer), 0 or a size of the split-K layout, and held by the kept workspace of the stream."""
    ctx = ops.context
    heads = q.shape[1]
    out = torch.empty(q.shape[0], heads, 512, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[0], heads, dtype=torch.float32, device=q.device)
    real = calls.attend_args(ctx.device, q, topk, cache, out, layout=layout, scale_mode=mode, sm_scale=SM,
                             outer_scale=scale, valid_len=valid, lse=lse, stream=torch_ops.current_stream(ctx))
    assert plan == ctx.attend_workspace_bytes(real)
    assert plan == 0 or plan in split_workspace_sizes(q.shape[0], heads, topk.shape[1]), plan
    if plan:
        assert ctx.workspace.kept(torch_ops.current_stream(ctx)).shape[0] >= plan


@pytest.mark.skipif(not CUDA, reason="no CUDA device: the captured step runs on the GPU machine")
@pytest.mark.parametrize("layout, mode, scale", FORMATS)
@pytest.mark.parametrize("heads", [16, 128])
def test_captured_step_should_replay_with_new_data_like_eager_calls(plugin, layout, mode, scale, heads):
    ops = ops_for(plugin, "cuda", layout, mode)
    record = nvfp4_mla._abi.record_bytes(layout)
    steps = [Batch(Paged(record, "cuda"), heads, "cuda", seed=s) for s in (11, 12, 13)]
    live = Paged(record, "cuda")  # the captured cache; the eager one below gets the same history
    eager = Paged(record, "cuda")
    for paged in (live, eager):
        for b in steps:
            b.paged = paged
            write_history(ops, b, scale)
    first = steps[0]
    kv_c, k_pe, slots = (t.clone() for t in step_tokens(first, pad=3))
    q, topk, valid = first.q.clone(), first.topk.clone(), first.valid.clone()
    plan = kernels.plan_step(ops, q.shape[0], heads, TOPK, record, outer_scale=scale)
    check_plan(ops, plan, q, topk, valid, kernels.flat_rows(live.cache), layout, mode, scale)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        kernels.cache_update(ops, kv_c, k_pe, live.cache, slots, outer_scale=scale)
        out, lse = kernels.forward_mqa(ops, (q[..., :512], q[..., 512:]), live.cache, topk, valid, sm_scale=SM,
                                       outer_scale=scale)
    previous = None
    for b in steps:
        new = step_tokens(b, pad=3)
        for dst, src in zip((kv_c, k_pe, slots, q, topk, valid), (*new, b.q, b.topk, b.valid)):
            dst.copy_(src)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            graph.replay()
        side.synchronize()
        kernels.cache_update(ops, new[0], new[1], eager.cache, new[2], outer_scale=scale)
        want, want_lse = kernels.forward_mqa(ops, b.q, eager.cache, b.topk, b.valid, sm_scale=SM, outer_scale=scale)
        torch.cuda.synchronize()
        assert torch.equal(live.buffer, eager.buffer), "cache bytes"
        assert torch.equal(out.view(torch.int16), want.view(torch.int16)), "out"
        assert torch.equal(lse.view(torch.int32), want_lse.view(torch.int32)), "lse"
        b.paged = live
        check_against_reference(ops, b, out, lse, scale)
        assert previous is None or not torch.equal(previous, out), "the replay reads the new data"
        previous = out.clone()
    del graph
    torch.cuda.synchronize()
