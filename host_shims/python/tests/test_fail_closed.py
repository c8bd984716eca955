"""Issue 37 in the shim: every array the plugin writes must be writable (numpy's flag, the array
interface's, PyTorch's own in-place rules), and a mistaken argument is named with its real cause."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC
from samples import tokens
from test_prepared import FakeTorch

KW = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)


def read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


class Interface:
    """An object exposing only __array_interface__, with its data's read-only flag set."""

    def __init__(self, array):
        self._keep = array
        self.__array_interface__ = dict(array.__array_interface__, data=(array.ctypes.data, True))


def decode_inputs(n_q=2, h=4, topk=8):
    rng = np.random.default_rng(3)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((n_q, h, 576)).astype(np.float32))
    return q, rng.integers(0, 16, (n_q, topk)).astype(np.int32)


def test_write_should_refuse_a_read_only_cache_before_writing(ctx):
    x = tokens(4)
    frozen = bytes(4 * 368)  # immutable: np.frombuffer gives a read-only view of it
    cache = np.frombuffer(frozen, np.uint8).reshape(1, 4, 368)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^cache: it is read-only \(__array_interface__\['data'\] says so"):
        ctx.write(x[:, :512], x[:, 512:], np.arange(4, dtype=np.int64), cache, **KW)
    assert frozen == bytes(4 * 368)
    cache = np.zeros((1, 4, 368), np.uint8)
    for name, kwargs in (("capture_max_abs", dict(capture_max_abs=read_only(np.zeros(1, np.float32)))),
                         ("nonfinite_count", dict(nonfinite_count=read_only(np.zeros(1, np.int64))))):
        with pytest.raises(nvfp4_mla.ArrayError, match=f"^{name}: it is read-only"):
            ctx.write(x[:, :512], x[:, 512:], np.arange(4, dtype=np.int64), cache, **kwargs, **KW)
    assert not cache.any()
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^cache: it is read-only"):
        ctx.prepare_write(x[:, :512], x[:, 512:], np.arange(4, dtype=np.int64), Interface(cache), **KW)


def test_readers_should_refuse_read_only_outputs(ctx):
    cache = np.zeros((1, 16, 368), np.uint8)
    slots = np.arange(2, dtype=np.int32)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it is read-only"):
        ctx.gather(cache, slots, read_only(np.zeros((2, 576), np.uint16)), **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it is read-only"):
        ctx.gather(cache, slots, Interface(np.zeros((2, 576), np.uint16)), **KW)
    q, top = decode_inputs()
    out, lse = np.zeros((2, 4, 512), np.uint16), np.zeros((2, 4), np.float32)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it is read-only"):
        ctx.attend(q, top, cache, read_only(out), sm_scale=0.1, **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^lse: it is read-only"):
        ctx.attend(q, top, cache, out, lse=read_only(lse), sm_scale=0.1, **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^workspace: it is read-only"):
        ctx.attend(q, top, cache, out, sm_scale=0.1, workspace=read_only(np.zeros(1 << 16, np.uint8)), **KW)
    po, pl = np.zeros((2, 2, 4, 512), np.float32), np.zeros((2, 2, 4), np.float32)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it is read-only"):
        ctx.merge(po, pl, read_only(out))
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^lse: it is read-only"):
        ctx.merge(po, pl, out, lse=read_only(lse))
    # The prepared array form checks each call's outputs too (its inputs are trusted).
    g = ctx.prepare_gather(cache, slots, np.zeros((2, 576), np.uint16), **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it is read-only"):
        g(slots, read_only(np.zeros((2, 576), np.uint16)))
    a = ctx.prepare_attend(q, top, cache, out, lse=lse, sm_scale=0.1, **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^lse: it is read-only"):
        a(q, top, out, lse=read_only(lse))


class GradTorch(FakeTorch):
    requires_grad = True


class InferenceTorch(FakeTorch):
    def is_inference(self):
        return True


def test_torch_outputs_should_follow_pytorchs_in_place_rules(ctx):
    """A tensor that requires grad is never written in place by PyTorch; the plugin's raw write would
    bypass autograd, so the shim refuses it (FakeTorch: the shim's duck-typed view of a tensor)."""
    cache = np.zeros((1, 16, 368), np.uint8)
    slots = np.arange(2, dtype=np.int32)
    with pytest.raises(nvfp4_mla.ArrayError, match=r"^out: it requires grad, and PyTorch lets no such tensor"):
        ctx.gather(cache, slots, GradTorch(np.zeros((2, 576), np.uint16)), **KW)
    ctx.gather(cache, slots, FakeTorch(np.zeros((2, 576), np.uint16)), **KW)  # an ordinary tensor is written
    try:
        import torch
    except ImportError:
        return
    with pytest.raises(nvfp4_mla.ArrayError, match="an inference tensor, which PyTorch lets be written only inside"):
        with torch.inference_mode():
            frozen = torch.zeros((2, 576), dtype=torch.bfloat16)
        ctx.gather(cache, slots, frozen, **KW)
    with torch.inference_mode():
        ctx.gather(cache, slots, frozen, **KW)


@pytest.mark.parametrize("call, words", [
    (lambda c, x: c.write(None, x[:, 512:], np.arange(2, dtype=np.int64), np.zeros((1, 2, 368), np.uint8), **KW),
     "kv_c is None: this call needs the array"),
    (lambda c, x: c.gather(np.zeros((1, 2, 368), np.uint8), np.arange(2, dtype=np.int32), None, **KW),
     "out is None: this call needs the array"),
    (lambda c, x: c.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), np.zeros((1, 2, 368), np.uint8),
                          layout=LAYOUT_FP8_ROPE_368, scale_mode=None),
     "scale_mode=None: expected an integer, nvfp4_mla.SCALE_STATIC or nvfp4_mla.SCALE_PER_TOKEN"),
    (lambda c, x: c.gather(np.zeros((1, 2, 368), np.uint8), np.arange(2, dtype=np.int32),
                           np.zeros((2, 576), np.uint16), layout="368", scale_mode=SCALE_STATIC),
     "layout='368': expected an integer, one of nvfp4_mla.LAYOUT_*"),
    (lambda c, x: c.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), np.zeros((1, 2, 368), np.uint8),
                          layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC, outer_scale="1.0"),
     "outer_scale='1.0': expected a number"),
])
def test_mistaken_arguments_should_be_named(ctx, call, words):
    with pytest.raises((TypeError, ValueError)) as err:
        call(ctx, tokens(2))
    assert words in str(err.value)


@pytest.mark.parametrize("device", ["cuda:x", "cuda:", "cuda:-1", "cuda0", "gpu"])
def test_context_should_name_a_device_it_cannot_read(plugin, device):
    with pytest.raises(ValueError, match=f"device '{device}': expected 'cpu', 'cuda' or 'cuda:N' with N a device index"):
        nvfp4_mla.Context(plugin, device)


def test_dcp_example_should_say_it_needs_torch(plugin_path, tmp_path):
    """Without PyTorch (a torch module that cannot be imported stands in), the example says so."""
    (tmp_path / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    shim = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NVFP4_MLA_PLUGIN=plugin_path, PYTHONPATH=f"{tmp_path}:{shim}")
    done = subprocess.run([sys.executable, os.path.join(shim, "examples", "dcp_decode.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 77
    assert "dcp_decode.py: needs PyTorch with torch.distributed (No module named 'torch')" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_slot_past_the_cache_should_be_refused_on_the_cpu_before_anything_is_written(ctx):
    """Issue 37, case 6: one rule for write, gather and attend; the CPU refuses a slot >= capacity
    (negative slots stay padding); the CUDA counter is passed through (read-only refused)."""
    x = tokens(4)
    cache, counted = np.zeros((1, 4, 368), np.uint8), np.zeros(1, np.int64)
    with pytest.raises(nvfp4_mla.InvalidArgument, match=re.escape(
            "write: slot_mapping[2] = 99 is at or past the cache's capacity 4 (num_blocks * block_size): its "
            "token's record would be lost")):
        ctx.write(x[:, :512], x[:, 512:], np.array([0, -1, 99, 3], np.int64), cache, out_of_range_count=counted, **KW)
    assert not cache.any() and counted[0] == 0
    ctx.write(x[:, :512], x[:, 512:], np.array([0, -1, -5, 3], np.int64), cache, out_of_range_count=counted, **KW)
    assert cache[0, 0].any() and not cache[0, 1:3].any() and cache[0, 3].any() and counted[0] == 0
    with pytest.raises(nvfp4_mla.ArrayError, match="^out_of_range_count: it is read-only"):
        ctx.write(x[:, :512], x[:, 512:], np.arange(4, dtype=np.int64), cache, out_of_range_count=read_only(counted),
                  **KW)
    with pytest.raises(nvfp4_mla.InvalidArgument, match=re.escape("gather: slots[1] = 4 is neither -1 nor in [0, 4)")):
        ctx.gather(cache, np.array([0, 4], np.int32), np.zeros((2, 576), np.uint16), **KW)


def test_the_installed_schema_should_say_what_the_plugin_takes(plugin, profile_path, tmp_path):
    """Issue 58: share/nvfp4-mla/ gets the v1 calibration format's JSON Schema. Its bounds are the plugin's
    (N12: a scale whose max_abs is outside [2^-14, 65504] is refused), and the real file fits it."""
    import json
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    schema = json.load(open(os.path.join(root, "data", "nvfp4_ds_mla_outer_scale_v1.schema.json")))
    real = json.load(open(profile_path))
    assert set(schema["required"]) <= set(real) <= set(schema["properties"])
    bounds = schema["properties"]["scales"]["items"]
    assert all(bounds["minimum"] <= s <= bounds["maximum"] for s in real["scales"])

    def opened(scale):
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": 1, "latent_dim": 512,
                                    "denominator": 2688.0, "scales": [scale]}))
        return nvfp4_mla.CacheFormat(fp8_rope=True, scales_file=str(path)).open(plugin)

    for inside in (bounds["minimum"] * 1.001, bounds["maximum"] * 0.999):
        opened(inside).close()
    for outside in (bounds["minimum"] * 0.999, bounds["maximum"] * 1.001, 1e30, 1e-30):
        with pytest.raises(nvfp4_mla.ConfigError, match=r'"scales"\[0\] = .* implies max_abs .* outside'):
            opened(outside)
