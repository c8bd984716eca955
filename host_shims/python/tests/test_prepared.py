"""The prepared calls on the CPU backend: the same bytes as the one-shot calls (bound buffers, their
first n rows, new arrays per call, PyTorch-like tensors), no Python allocation per run(), the checks
made at bind, and what each call still refuses."""
import itertools
import re
import sys
import tracemalloc

import numpy as np
import pytest

import nvfp4_mla
from samples import tokens
from nvfp4_mla import LAYOUT_BF16_ROPE_432, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC

MODES = [(LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, None), (LAYOUT_BF16_ROPE_432, SCALE_STATIC, 0.004)]


def cache_for(layout, blocks=2):
    return np.zeros((blocks, 16, nvfp4_mla._abi.record_bytes(layout)), np.uint8)


def decode_inputs(n, h=4, topk=8, seed=1):
    rng = np.random.default_rng(seed)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((n, h, 576)).astype(np.float32)).reshape(n, h, 576)
    slots = rng.integers(-1, 32, (n, topk)).astype(np.int32)
    return q, slots, rng.integers(0, topk + 1, n).astype(np.int32)


@pytest.mark.parametrize("layout, mode, scale", MODES)
def test_prepared_write_should_write_the_one_shot_bytes(ctx, layout, mode, scale):
    x, slots = tokens(12, scale=0.1), np.array([5, 3, -1, 0, 9, 31, 2, 7, 8, 1, 30, 4], np.int64)
    want, got, part = cache_for(layout), cache_for(layout), cache_for(layout)
    kw = dict(layout=layout, scale_mode=mode, outer_scale=scale)
    ctx.write(x[:, :512], x[:, 512:], slots, want, **kw)
    ctx.prepare_write(x[:, :512], x[:, 512:], slots, got, **kw).run()
    assert bytes(got) == bytes(want)
    w = ctx.prepare_write(x[:, :512], x[:, 512:], slots, part, **kw)
    w.run(5)  # the first five tokens only
    first = cache_for(layout)
    ctx.write(x[:5, :512], x[:5, 512:], slots[:5], first, **kw)
    assert bytes(part) == bytes(first)
    y = tokens(3, seed=9)
    w(y[:, :512], y[:, 512:], np.array([10, 11, 12], np.int64))  # new arrays, same bound cache
    ctx.write(y[:, :512], y[:, 512:], np.array([10, 11, 12], np.int64), first, **kw)
    assert bytes(part) == bytes(first)
    w.run(0)  # points back at the bound arrays: zero tokens write nothing
    assert bytes(part) == bytes(first)


def test_prepared_gather_should_read_the_one_shot_rows(ctx):
    x, cache = tokens(32, scale=0.1), cache_for(LAYOUT_FP8_ROPE_368)
    ctx.write(x[:, :512], x[:, 512:], np.arange(32, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
              scale_mode=SCALE_PER_TOKEN)
    slots = np.array([3, -1, 31, 0, 7], np.int32)
    want, got = np.zeros((5, 576), np.uint16), np.full((5, 576), 7, np.uint16)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    ctx.gather(cache, slots, want, **kw)
    g = ctx.prepare_gather(cache, slots, got, **kw)
    g.run(2)
    assert bytes(got[:2]) == bytes(want[:2]) and (got[2:] == 7).all()
    g.run()
    assert bytes(got) == bytes(want)
    other = np.zeros((2, 576), np.uint16)
    g(slots[3:], other)
    assert bytes(other) == bytes(want[3:])


@pytest.mark.parametrize("layout, mode, scale", MODES)
def test_prepared_attend_should_give_the_one_shot_outputs(ctx, layout, mode, scale):
    x, cache = tokens(32, seed=4, scale=0.1), cache_for(layout)
    kw = dict(layout=layout, scale_mode=mode, outer_scale=scale, sm_scale=0.07)
    ctx.write(x[:, :512], x[:, 512:], np.arange(32, dtype=np.int64), cache, layout=layout, scale_mode=mode,
              outer_scale=scale)
    q, slots, valid = decode_inputs(6)
    want_out, want_lse = np.zeros((6, 4, 512), np.uint16), np.zeros((6, 4), np.float32)
    ctx.attend(q, slots, cache, want_out, lse=want_lse, valid_len=valid, **kw)
    out, lse = np.zeros_like(want_out), np.zeros_like(want_lse)
    a = ctx.prepare_attend(q, slots, cache, out, lse=lse, valid_len=valid, **kw)
    a.run(4)
    assert bytes(out[:4]) == bytes(want_out[:4]) and not out[4:].any() and bytes(lse[:4]) == bytes(want_lse[:4])
    a.run()
    assert bytes(out) == bytes(want_out) and bytes(lse) == bytes(want_lse)
    out2, lse2 = np.zeros((2, 4, 512), np.uint16), np.zeros((2, 4), np.float32)
    a(q[1:3], slots[1:3], out2, lse=lse2, valid_len=valid[1:3])
    assert bytes(out2) == bytes(want_out[1:3]) and bytes(lse2) == bytes(want_lse[1:3])


def traced_peak(call, count=2000):
    """Bytes of Python memory `count` calls of `call` take at their peak, after warm-up."""
    tracemalloc.start()
    try:
        for _ in range(5):
            call()
        calls = itertools.repeat(None, count)  # a range() would allocate its large integers
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in calls:
            call()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(sys.version_info < (3, 9), reason="tracemalloc.reset_peak is Python 3.9+")
def test_prepared_run_should_allocate_no_python_memory_per_call(ctx):
    x, cache = tokens(8), cache_for(LAYOUT_FP8_ROPE_368)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    w = ctx.prepare_write(x[:, :512], x[:, 512:], np.arange(8, dtype=np.int64), cache, **kw)
    g = ctx.prepare_gather(cache, np.arange(8, dtype=np.int32), np.zeros((8, 576), np.uint16), **kw)
    q, slots, valid = decode_inputs(3)
    a = ctx.prepare_attend(q, slots, cache, np.zeros((3, 4, 512), np.uint16), lse=np.zeros((3, 4), np.float32),
                           valid_len=valid, sm_scale=0.1, **kw)
    two = 2
    assert traced_peak(w.run) == 0
    assert traced_peak(lambda: w.run(two, None)) == 0
    assert traced_peak(g.run) == 0
    assert traced_peak(a.run) == 0
    assert traced_peak(lambda: a.run(two)) == 0


@pytest.mark.parametrize("case, error", [
    ("f32 input", "kv_c: dtype f32, expected bf16 or f16"),
    ("short k_pe", "k_pe: shape[0] is 3, expected 4"),
    ("wrong record size", "cache: shape[2] is 432, expected 368"),
    ("stream on cpu", "stream: must be None on a CPU context"),
])
def test_prepare_should_check_arrays_as_the_one_shot_call_does(ctx, case, error):
    x = tokens(4)
    kv, pe, cache, kwargs = x[:, :512], x[:, 512:], np.zeros((1, 4, 368), np.uint8), {}
    if case == "f32 input":
        kv = np.zeros((4, 512), np.float32)
    elif case == "short k_pe":
        pe = pe[:3]
    elif case == "wrong record size":
        cache = np.zeros((1, 4, 432), np.uint8)
    else:
        kwargs["stream"] = 7
    with pytest.raises(ValueError, match=re.escape(error)):
        ctx.prepare_write(kv, pe, np.arange(4, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
                          scale_mode=SCALE_STATIC, **kwargs)


def test_prepared_calls_should_refuse_what_they_cannot_trust(ctx):
    x, cache = tokens(4), cache_for(LAYOUT_FP8_ROPE_368)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC)
    w = ctx.prepare_write(x[:, :512], x[:, 512:], np.arange(4, dtype=np.int64), cache, **kw)
    with pytest.raises(ValueError, match=r"write: n = 5, the bound arrays hold 0..4 rows"):
        w.run(5)
    with pytest.raises(nvfp4_mla.ArrayError, match="bound to ndarray arrays got a list"):
        w([[0] * 512], x[:1, 512:], np.zeros(1, np.int64))
    # Row counts are read from each array and compared by the plugin, in its words.
    with pytest.raises(nvfp4_mla.InvalidArgument, match="k_pe: shape\\[0\\] is 2, must be 3"):
        w(x[:3, :512], x[:2, 512:], np.arange(3, dtype=np.int64))
    with pytest.raises(nvfp4_mla.InvalidArgument, match="stream must be NULL on a CPU context"):
        w.run(stream=7)
    w.run()  # a refused call leaves the prepared call usable
    q, slots, _ = decode_inputs(2)
    a = ctx.prepare_attend(q, slots, cache, np.zeros((2, 4, 512), np.uint16), sm_scale=0.1, **kw)
    with pytest.raises(nvfp4_mla.ArrayError, match="lse and valid_len exactly when"):
        a(q, slots, np.zeros((2, 4, 512), np.uint16), lse=np.zeros((2, 4), np.float32))
    ctx.close()
    with pytest.raises(ValueError, match="attend: the context of this prepared call is closed"):
        a.run()


def test_prepared_attends_of_one_shape_should_share_one_workspace_scan(ctx):
    q, slots, _ = decode_inputs(5)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, sm_scale=0.1)
    layers = [ctx.prepare_attend(q, slots, cache_for(LAYOUT_FP8_ROPE_368), np.zeros((5, 4, 512), np.uint16), **kw)
              for _ in range(3)]
    assert ctx.workspace.shapes_asked == 1  # one scan over 1..5 queries for the three layers
    assert all(layer.workspace is None for layer in layers)  # the CPU backend needs no scratch
    for layer in layers:
        layer.run()


class FakeTorch:
    """Just enough of a PyTorch CPU tensor for the shim (data_ptr, size, stride, dtype, device)."""

    class _Device:
        type, index = "cpu", None

    _DTYPES = {np.uint16: "torch.bfloat16", np.int32: "torch.int32", np.int64: "torch.int64", np.uint8: "torch.uint8",
               np.float32: "torch.float32"}

    _CPU = _Device()  # one device object, as torch.device("cpu") compares equal to itself

    def __init__(self, array):
        self.a, self.device = array, self._CPU
        self.dtype, self.shape = self._DTYPES[array.dtype.type], array.shape

    def data_ptr(self):
        return self.a.__array_interface__["data"][0]

    def size(self, dim):
        return self.a.shape[dim]

    def stride(self):
        return tuple(s // self.a.itemsize for s in self.a.strides)


def test_prepared_calls_should_read_torch_tensors_by_data_ptr_and_size(ctx):
    x, cache = tokens(6, scale=0.1), cache_for(LAYOUT_FP8_ROPE_368)
    kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    slots = np.array([4, 0, 2, 9, 1, 3], np.int64)
    w = ctx.prepare_write(FakeTorch(x[:2, :512]), FakeTorch(x[:2, 512:]), FakeTorch(slots[:2]), FakeTorch(cache), **kw)
    w(FakeTorch(x[:, :512]), FakeTorch(x[:, 512:]), FakeTorch(slots))
    want = cache_for(LAYOUT_FP8_ROPE_368)
    ctx.write(x[:, :512], x[:, 512:], slots, want, **kw)
    assert bytes(cache) == bytes(want)
    q, topk, _ = decode_inputs(3)
    out, want_out = np.zeros((3, 4, 512), np.uint16), np.zeros((3, 4, 512), np.uint16)
    a = ctx.prepare_attend(FakeTorch(q), FakeTorch(topk), FakeTorch(cache), FakeTorch(out), sm_scale=0.1, **kw)
    a(FakeTorch(q[1:]), FakeTorch(topk[1:]), FakeTorch(out[:2]))
    ctx.attend(q[1:], topk[1:], cache, want_out[:2], sm_scale=0.1, **kw)
    assert bytes(out) == bytes(want_out)
