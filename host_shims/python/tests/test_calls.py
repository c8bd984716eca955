"""write / gather / attend through the shim on the CPU backend: round trips, a golden record,
and the checks the shim makes before calling (dtype, shape, strides, device)."""
import ctypes
import re

import numpy as np
import pytest

import nvfp4_mla
from samples import tokens
from nvfp4_mla import calls
from nvfp4_mla import LAYOUT_BF16_ROPE_432, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC


def test_round_trip_should_stay_within_the_error_bound(ctx):
    x = tokens(64, scale=0.02)
    for layout, mode, bytes_, scale in ((LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 368, 0.0),
                                        (LAYOUT_BF16_ROPE_432, SCALE_STATIC, 432, 0.02 * 4 / 2688)):
        cache = np.zeros((4, 16, bytes_), np.uint8)
        ctx.write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, layout=layout, scale_mode=mode,
                  outer_scale=scale)
        out = np.zeros((64, 576), np.uint16)
        ctx.gather(cache, np.arange(64, dtype=np.int32), out, layout=layout, scale_mode=mode, outer_scale=scale)
        a, b = nvfp4_mla.bf16_to_float32(x[:, :512]), nvfp4_mla.bf16_to_float32(out[:, :512])
        assert 0.05 < np.linalg.norm(a - b) / np.linalg.norm(a) < 0.11


def test_write_should_produce_the_golden_tie_record(ctx):
    row = np.zeros((1, 576), np.float32)
    row[0, :16] = [6, .25, .75, 1.25, 1.75, 2.5, 3.5, 5, -6, -.25, -.75, -1.25, -1.75, -2.5, -3.5, -5]
    x = nvfp4_mla.bf16_bits(row)
    cache = np.full((1, 1, 368), 0xA5, np.uint8)
    ctx.write(x[:, :512], x[:, 512:], np.zeros(1, np.int64), cache, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC)
    want = np.zeros(368, np.uint8)
    want[:8] = [0x07, 0x22, 0x44, 0x66, 0x8F, 0xAA, 0xCC, 0xEE]
    want[256] = 0x38
    assert bytes(cache[0, 0]) == bytes(want)


def test_capture_and_counter_should_be_filled(ctx):
    x = tokens(3)
    cap, cnt = np.zeros(1, np.float32), np.zeros(1, np.int64)
    ctx.write(x[:, :512], x[:, 512:], np.array([0, -1, 2], np.int64), np.zeros((1, 4, 368), np.uint8),
              layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, capture_max_abs=cap, nonfinite_count=cnt)
    written = nvfp4_mla.bf16_to_float32(x[[0, 2], :512])
    assert cap[0] == np.abs(written).max() and cnt[0] == 0


@pytest.mark.parametrize("case, error", [
    ("f32 input", "kv_c: dtype f32, expected bf16 or f16"),
    ("short k_pe", "k_pe: shape[0] is 3, expected 4"),
    ("i32 slots", "slot_mapping: dtype i32, expected i64"),
    ("wrong record size", "cache: shape[2] is 432, expected 368"),
    ("stream on cpu", "stream: must be None on a CPU context"),
    ("odd byte stride", "is not a multiple of the 2-byte element"),
])
def test_shim_should_check_arrays_before_calling(ctx, case, error):
    x = tokens(4)
    kv, pe = x[:, :512], x[:, 512:]
    slots, cache = np.arange(4, dtype=np.int64), np.zeros((1, 4, 368), np.uint8)
    kwargs = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC)
    if case == "f32 input":
        kv = np.zeros((4, 512), np.float32)
    elif case == "short k_pe":
        pe = pe[:3]
    elif case == "i32 slots":
        slots = slots.astype(np.int32)
    elif case == "wrong record size":
        cache = np.zeros((1, 4, 432), np.uint8)
    elif case == "stream on cpu":
        kwargs["stream"] = 7
    elif case == "odd byte stride":
        kv = np.frombuffer(np.zeros(4 * 1025 + 1, np.uint8).tobytes()[1:], np.uint16)[:2048].reshape(4, 512)
        kv = np.lib.stride_tricks.as_strided(kv, (4, 512), (1025, 2))
    with pytest.raises((nvfp4_mla.ArrayError, ValueError), match=re.escape(error)):
        ctx.write(kv, pe, slots, cache, **kwargs)


def test_shim_should_pass_the_mode_as_given_and_let_the_plugin_refuse(ctx):
    """No silent rewrite: a per-token call with an outer scale reaches the plugin as it is, and the
    plugin's mode rule refuses it in its words; an unknown layout is the plugin's to name too."""
    x = tokens(2)
    with pytest.raises(nvfp4_mla.InvalidArgument, match=r"write: outer_scale is 0.5, must be 0 in per-token mode"):
        ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), np.zeros((1, 2, 368), np.uint8),
                  layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, outer_scale=0.5)
    with pytest.raises(nvfp4_mla.InvalidArgument, match=r"gather: layout is 9, must be 1 \(fp8_rope_368\)"):
        ctx.gather(np.zeros((1, 2, 368), np.uint8), np.array([0], np.int32), np.zeros((1, 576), np.uint16),
                   layout=9, scale_mode=SCALE_STATIC)
    with pytest.raises(nvfp4_mla.InvalidArgument, match="read by attend only"):
        ctx.gather(np.zeros((1, 2, 656), np.uint8), np.array([0], np.int32), np.zeros((1, 576), np.uint16),
                   layout=nvfp4_mla.LAYOUT_FP8_DS_MLA_656, scale_mode=SCALE_STATIC)


def test_plugin_errors_should_carry_the_plugins_message(ctx):
    x = tokens(2)
    with pytest.raises(nvfp4_mla.InvalidArgument, match="per-token requires layout fp8_rope_368") as err:
        ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), np.zeros((1, 2, 432), np.uint8),
                  layout=LAYOUT_BF16_ROPE_432, scale_mode=SCALE_PER_TOKEN)
    assert err.value.status == 1
    with pytest.raises(nvfp4_mla.InvalidArgument, match=r"gather: slots\[0\] = 9 is neither -1 nor in \[0, 2\)"):
        ctx.gather(np.zeros((1, 2, 368), np.uint8), np.array([9], np.int32), np.zeros((1, 576), np.uint16),
                   layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC)


def e4m3(codes):
    """E4M3 codes to float32 (docs/record-format.md 2c); the writer never emits NaN codes."""
    c = codes.astype(np.int32)
    e, m = (c >> 3) & 15, (c & 7).astype(np.float32)
    mag = np.where(e == 0, m / 8 * np.float32(2.0**-6), (1 + m / 8) * np.exp2(e - 7).astype(np.float32))
    return np.where(c & 0x80, -mag, mag).astype(np.float32)


def record_values(rec):
    """One per-token 368-byte record's 576 binary32 values (docs/record-format.md section 5)."""
    codes = np.stack([rec[:256] & 15, rec[:256] >> 4], axis=1).reshape(512)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)[codes & 7] * np.where(codes & 8, -1, 1).astype(np.float32)
    d = np.repeat(e4m3(rec[256:288]), 16)
    r, s_t = rec[288:296].view(np.float32)
    return np.concatenate([(e2m1 * d) * s_t, e4m3(rec[304:368]) * r]).astype(np.float32)


def test_attend_should_match_a_numpy_attention_over_the_records_values(ctx):
    x = tokens(32, seed=5)
    cache = np.zeros((1, 32, 368), np.uint8)
    ctx.write(x[:, :512], x[:, 512:], np.arange(32, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
              scale_mode=SCALE_PER_TOKEN)
    q = tokens(2 * 3, seed=6).reshape(2, 3, 576)
    topk = np.array([[0, 5, 5, -1, 9, 31], [-1, -1, -1, -1, -1, -1]], np.int32)
    out, lse = np.zeros((2, 3, 512), np.uint16), np.zeros((2, 3), np.float32)
    ctx.attend(q, topk, cache, out, lse=lse, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, sm_scale=0.05)
    valid = topk[0][topk[0] >= 0]
    keys = np.stack([record_values(cache[0, i]) for i in valid]).astype(np.float64)
    rows = np.zeros((6, 576), np.uint16)  # gather returns the same values rounded to bf16
    ctx.gather(cache, topk[0], rows, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    assert np.abs(nvfp4_mla.bf16_to_float32(rows[topk[0] >= 0]) - keys).max() <= 2.0**-8 * np.abs(keys).max()
    s = nvfp4_mla.bf16_to_float32(q[0]).astype(np.float64) @ keys.T * 0.05
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ keys[:, :512]
    assert np.abs(nvfp4_mla.bf16_to_float32(out[0]) - want).max() < 1e-2 * np.abs(want).max()
    assert np.allclose(lse[0], np.log(np.exp(s).sum(axis=1)), rtol=1e-5)
    assert not out[1].any() and np.all(np.isneginf(lse[1]))  # no valid entry: zeros and -inf


def test_attend_should_read_656_byte_fp8_ds_mla_records(ctx):
    rng = np.random.default_rng(7)
    cache = np.zeros((1, 8, 656), np.uint8)
    cache[0, :, :512] = rng.integers(0, 256, (8, 512)) & 0xF7  # no NaN codes
    cache[0, :, 512:528] = np.repeat(np.array([[2.0**-7, 2.0**-6, 2.0**-8, 2.0**-5]], np.float32), 8, 0).view(np.uint8)
    rope = nvfp4_mla.bf16_bits(rng.standard_normal((8, 64)).astype(np.float32))
    cache[0, :, 528:] = rope.view(np.uint8).reshape(8, 128)
    tiles = cache[0, :, 512:528].copy().view(np.float32)
    latent = e4m3(cache[0, :, :512]) * np.repeat(tiles, 128, axis=1)
    keys = np.concatenate([nvfp4_mla.bf16_to_float32(nvfp4_mla.bf16_bits(latent)),
                           nvfp4_mla.bf16_to_float32(rope)], axis=1).astype(np.float64)
    q = tokens(2, seed=8).reshape(1, 2, 576)
    topk = np.array([[3, 0, 7, -1]], np.int32)
    out, lse = np.zeros((1, 2, 512), np.uint16), np.zeros((1, 2), np.float32)
    ctx.attend(q, topk, cache, out, lse=lse, layout=nvfp4_mla.LAYOUT_FP8_DS_MLA_656, scale_mode=SCALE_STATIC,
               sm_scale=0.1)
    k = keys[[3, 0, 7]]
    s = nvfp4_mla.bf16_to_float32(q[0]).astype(np.float64) @ k.T * 0.1
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ k[:, :512]
    assert np.abs(nvfp4_mla.bf16_to_float32(out[0]) - want).max() < 1e-2 * np.abs(want).max()
    assert np.allclose(lse[0], np.log(np.exp(s).sum(axis=1)), rtol=1e-5)


def test_cpu_arrays_should_be_refused_by_a_cuda_device_check():
    x = tokens(2)  # the argument builder alone, without a CUDA device
    with pytest.raises(nvfp4_mla.ArrayError, match="kv_c: lives on cpu, the context is on cuda:0"):
        calls.write_args((nvfp4_mla._abi.DEVICE_CUDA, 0), x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64),
                         np.zeros((1, 2, 368), np.uint8), layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC)


def test_context_should_hand_init_a_snapshot():
    """init's snapshot (ABI 1.1: InitArgs.environ): NAME=VALUE bytes, NULL-terminated; None keeps the
    process environment (a NULL pointer)."""
    from nvfp4_mla import _abi
    from nvfp4_mla.context import snapshot
    env = snapshot({"NVFP4_MLA_ATTEND_MMA": "sync", "NVFP4_MLA_ATTEND_MERGE": "separate"})
    assert list(env) == [b"NVFP4_MLA_ATTEND_MMA=sync", b"NVFP4_MLA_ATTEND_MERGE=separate", None]
    assert snapshot(None) is None and list(snapshot({})) == [None]
    args = _abi.InitArgs(environ=ctypes.cast(env, ctypes.POINTER(ctypes.c_char_p)))
    assert args.environ[1] == b"NVFP4_MLA_ATTEND_MERGE=separate"


def test_cpu_context_should_take_a_snapshot_it_does_not_read(plugin):
    """A CPU context reads no setting: a value a CUDA context would refuse (NVFP4_MLA_ATTEND_MMA=bogus)
    passes through init unread."""
    ctx = nvfp4_mla.Context(plugin, "cpu", environ={"NVFP4_MLA_ATTEND_MMA": "bogus"})
    assert ctx.device_name == "cpu"
    ctx.close()
