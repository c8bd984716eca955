"""nvfp4_mla.torch_ops: the plugin's calls as PyTorch operators (issue 39). torch.library.opcheck on
every op (CPU backend; CUDA where a device is present), the ops' bytes against the shim's one-shot
calls, the shim's refusals in its words (eager and while torch.compile traces), a decode step compiled
with fullgraph=True equal to eager bit for bit, and on CUDA the step compiled with
mode="reduce-overhead" (captured, then replayed with new data) and captured by hand in
torch.cuda.graph. Without PyTorch (CI) only the import checks run; the rest skip, saying so. The CUDA
tests print what they checked (run with -s to see it). The example backend's and the hot-path
benchmark's torch paths are checked with the scripts themselves (test_scripts.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_BF16_ROPE_432, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC

try:
    import torch
except ImportError:
    torch = None

SHIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed for this interpreter: the torch "
                                                        "operators' tests run where it is (.ci/run's step 6, the GPU machine)")
CUDA = torch is not None and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device (or no PyTorch): the torch operators' CUDA "
                                                 "checks run on the GPU machine")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
SM = 576 ** -0.5
FORMATS = [(LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, None), (LAYOUT_BF16_ROPE_432, SCALE_STATIC, 0.004)]


@pytest.fixture(scope="module")
def plugin():
    """The build's plugin (NVFP4_MLA_PLUGIN_PATH, as the shim suite sets it), else NVFP4_MLA_PLUGIN."""
    path = os.environ.get("NVFP4_MLA_PLUGIN_PATH")
    return nvfp4_mla.load(path) if path else nvfp4_mla.load()


@pytest.fixture
def torch_ops():
    from nvfp4_mla import torch_ops
    return torch_ops


def shim_python(code):
    env = dict(os.environ, PYTHONPATH=SHIM)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


# ---- Without PyTorch too. ----

def test_importing_the_package_should_not_import_torch():
    done = shim_python("import sys, nvfp4_mla; print('torch' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_torch_ops_without_torch_should_say_what_it_needs():
    done = shim_python("import sys; sys.modules['torch'] = None\n"  # what an absent torch looks like
                       "try:\n    import nvfp4_mla.torch_ops\nexcept ImportError as e:\n    print(e)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "nvfp4_mla.torch_ops needs PyTorch (pip install torch); the rest of nvfp4_mla does not"


# ---- Sample arguments. ----

def sample_cache(ops, device, layout=LAYOUT_FP8_ROPE_368, tokens=256, seed=0, outer_scale=None):
    """A cache of `tokens` written records (random bf16 tokens) on `device`, and those tokens."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, 576, generator=g).to(torch.bfloat16).to(device)
    cache = torch.zeros(tokens // 64, 64, nvfp4_mla._abi.record_bytes(layout), dtype=torch.uint8, device=device)
    ops.write(x[:, :512], x[:, 512:], torch.arange(tokens, device=device), cache, outer_scale=outer_scale)
    return cache, x


def op_samples(ops, device):
    """(op name, args) for opcheck: every op and each optional tensor present and absent."""
    g = torch.Generator().manual_seed(1)
    cid, lay, mode = ops.context_id, ops.layout, ops.scale_mode
    cache, _ = sample_cache(ops, device)
    x = torch.randn(5, 576, generator=g).to(torch.bfloat16).to(device)
    slot_mapping = torch.tensor([7, 3, -1, 200, 64], device=device)
    q = torch.randn(3, 16, 576, generator=g).to(torch.bfloat16).to(device)
    topk = torch.randint(-1, 256, (3, 64), generator=g, dtype=torch.int32).to(device)
    valid_len = torch.tensor([64, 5, 0], dtype=torch.int32, device=device)
    out, lse = torch.empty(3, 16, 512, dtype=torch.bfloat16, device=device), torch.empty(3, 16, device=device)
    po, pl = torch.randn(4, 3, 16, 512, generator=g).to(device), torch.randn(4, 3, 16, generator=g).to(device)
    pl[1, 0] = -float("inf")  # a part without a valid entry for query 0
    counters = (torch.zeros(1, device=device), torch.zeros(1, dtype=torch.int64, device=device))
    return [
        ("write", (x[:, :512], x[:, 512:], slot_mapping, cache, cid, lay, mode, 0.0, 0)),
        ("write", (x[:, :512], x[:, 512:], slot_mapping, cache, cid, lay, mode, 0.0, 0, *counters)),
        ("gather", (cache, topk[1], cid, lay, mode, 0.0)),
        ("gather_out", (cache, topk[1], torch.empty(64, 576, dtype=torch.bfloat16, device=device), cid, lay, mode,
                        0.0)),
        ("attend", (q, topk, cache, cid, lay, mode, 0.0, SM)),
        ("attend", (q, topk, cache, cid, lay, mode, 0.0, SM, valid_len)),
        ("attend_out", (q, topk, cache, out, lse, cid, lay, mode, 0.0, SM)),
        ("attend_out", (q, topk, cache, out, None, cid, lay, mode, 0.0, SM, valid_len)),
        ("merge", (po, pl, cid)),
        ("merge", (po.to(torch.bfloat16), pl, cid)),
        ("merge_out", (po, pl, out, lse, cid)),
        ("merge_out", (po, pl, out, None, cid)),
    ]


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_should_pass_for_every_op(plugin, torch_ops, device):
    with nvfp4_mla.Context(plugin, "cuda:0" if device == "cuda" else "cpu") as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        checked = []
        for name, args in op_samples(ops, device):
            results = torch.library.opcheck(getattr(torch.ops.nvfp4_mla, name).default, args)
            assert set(results.values()) == {"SUCCESS"}, (name, results)
            checked.append(name)
        assert sorted(set(checked)) == sorted(torch_ops._SCHEMAS)  # every registered op was checked
        print(f"\nopcheck on {device} ({ctx.device_name}): {', '.join(checked)}: {', '.join(results)}")


@needs_torch
def test_opcheck_should_catch_a_mutation_the_schema_does_not_declare(plugin, torch_ops):
    """The check opcheck makes of the mutation annotations can fail: a write declared as not mutating
    its cache is refused (so the `!` the ops declare is what passes)."""
    lib = torch.library.Library("nvfp4_mla_test_undeclared", "FRAGMENT")
    torch.library.define("nvfp4_mla_test_undeclared::write", torch_ops._SCHEMAS["write"].replace("(a!)", ""), lib=lib)
    torch.library.impl("nvfp4_mla_test_undeclared::write", "CPU", torch_ops._write, lib=lib)
    torch.library.register_fake("nvfp4_mla_test_undeclared::write", torch_ops._write_fake, lib=lib)
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        args = op_samples(ops, "cpu")[0][1]
        results = torch.library.opcheck(torch.ops.nvfp4_mla_test_undeclared.write.default, args,
                                        raise_exception=False)
    assert results["test_schema"] != "SUCCESS"
    assert "mutated" in str(results["test_schema"])


# ---- The ops against the shim's calls, and its refusals. ----

@needs_torch
@pytest.mark.parametrize("layout, mode, scale", FORMATS)
def test_ops_should_give_the_one_shot_calls_bytes(plugin, torch_ops, layout, mode, scale):
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=layout, scale_mode=mode)
        kw = dict(layout=layout, scale_mode=mode, outer_scale=scale)
        cache, x = sample_cache(ops, "cpu", layout, outer_scale=scale)
        want = torch.zeros_like(cache)
        ctx.write(x[:, :512], x[:, 512:], torch.arange(256), want, **kw)
        assert torch.equal(cache, want)
        g = torch.Generator().manual_seed(2)
        for step in range(3):  # one signature, new data each step: the kept struct reads the new pointers
            q = torch.randn(4, 16, 576, generator=g).to(torch.bfloat16)
            topk = torch.randint(-1, 256, (4, 32), generator=g, dtype=torch.int32)
            valid = torch.randint(0, 33, (4,), generator=g, dtype=torch.int32)
            out, lse = ops.attend(q, topk, cache, sm_scale=SM, outer_scale=scale, valid_len=valid)
            want_out, want_lse = torch.empty_like(out), torch.empty_like(lse)
            ctx.attend(q, topk, cache, want_out, lse=want_lse, sm_scale=SM, valid_len=valid, **kw)
            assert torch.equal(out, want_out) and torch.equal(lse, want_lse), f"step {step}"
            got = torch.full_like(out, 7.0)
            ops.attend(q, topk, cache, sm_scale=SM, outer_scale=scale, valid_len=valid, out=got)
            assert torch.equal(got, want_out)
            rows, want_rows = ops.gather(cache, topk[0], outer_scale=scale), torch.empty(32, 576, dtype=torch.bfloat16)
            ctx.gather(cache, topk[0], want_rows, **kw)
            assert torch.equal(rows, want_rows)
            po, pl = torch.randn(3, 4, 16, 512, generator=g), torch.randn(3, 4, 16, generator=g)
            m_out, m_lse = ops.merge(po, pl)
            want_out, want_lse = torch.empty_like(m_out), torch.empty_like(m_lse)
            ctx.merge(po, pl, want_out, lse=want_lse)
            assert torch.equal(m_out, want_out) and torch.equal(m_lse, want_lse)
        counters = torch.zeros(1), torch.zeros(1, dtype=torch.int64)
        bad = x[:4].clone()
        bad[1, 3] = float("nan")
        ops.write(bad[:, :512], bad[:, 512:], torch.arange(4), cache, outer_scale=scale, capture_max_abs=counters[0],
                  nonfinite_count=counters[1])
        assert counters[1].item() == 1
        assert counters[0].item() == pytest.approx(bad[[0, 2, 3], :512].float().abs().max().item())


def shim_refusal(call):
    with pytest.raises(nvfp4_mla.ArrayError) as exc:
        call()
    return str(exc.value)


@needs_torch
def test_ops_should_refuse_what_the_shim_refuses_in_its_words(plugin, torch_ops):
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cache, x = sample_cache(ops, "cpu")
        q = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
        topk = torch.zeros(2, 8, dtype=torch.int32)
        kw = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        ops.attend(q, topk, cache, sm_scale=SM)  # a good call first: its signature is kept
        cases = [
            (lambda: ops.attend(q.float(), topk, cache, sm_scale=SM),
             lambda: ctx.attend(q.float(), topk, cache, torch.empty(2, 16, 512, dtype=torch.bfloat16), sm_scale=SM,
                                **kw), "q: dtype f32, expected bf16"),
            (lambda: ops.attend(q, topk[:1], cache, sm_scale=SM),
             lambda: ctx.attend(q, topk[:1], cache, torch.empty(2, 16, 512, dtype=torch.bfloat16), sm_scale=SM, **kw),
             "slots: shape[0] is 1, expected 2"),
            (lambda: ops.write(x[:3, :512], x[:2, 512:], torch.arange(3), cache),
             lambda: ctx.write(x[:3, :512], x[:2, 512:], torch.arange(3), cache, **kw), "k_pe: shape[0] is 2, expected 3"),
            (lambda: ops.write(x[:3, :512], x[:3, 512:], torch.arange(3, dtype=torch.int32), cache),
             lambda: ctx.write(x[:3, :512], x[:3, 512:], torch.arange(3, dtype=torch.int32), cache, **kw),
             "slot_mapping: dtype i32, expected i64"),
            (lambda: ops.gather(cache[:, :, :300], topk[0]),
             lambda: ctx.gather(cache[:, :, :300], topk[0], torch.empty(8, 576, dtype=torch.bfloat16), **kw),
             "cache: shape[2] is 300, expected 368"),
            (lambda: ops.merge(torch.zeros(2, 3, 16, 512), torch.zeros(2, 3, 8)),
             lambda: ctx.merge(torch.zeros(2, 3, 16, 512), torch.zeros(2, 3, 8), torch.empty(3, 16, 512,
                                                                                               dtype=torch.bfloat16)),
             "partial_lse: shape[2] is 8, expected 16"),
        ]
        for op_call, shim_call, words in cases:
            assert shim_refusal(op_call) == shim_refusal(shim_call) == words
            compiled = torch.compile(lambda: op_call(), fullgraph=True, backend="aot_eager")
            with pytest.raises(Exception) as exc:  # refused by the fake implementation, while tracing
                compiled()
            assert f"ArrayError('{words}')" in str(exc.value)
            torch._dynamo.reset()
        with pytest.raises(ValueError, match="lse= needs out="):
            ops.attend(q, topk, cache, sm_scale=SM, lse=torch.empty(2, 16))


@needs_torch
def test_ops_should_refuse_an_output_pytorch_would_not_write_after_its_signature_is_kept(plugin, torch_ops):
    """The kept struct of a signature skips the shim's checks: an output of that dtype, shape and
    strides that requires grad, or an inference tensor outside torch.inference_mode(), is still refused
    (issue 37's rule, arrays.read_only), by each op that writes it."""
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cache, x = sample_cache(ops, "cpu")
        q, topk = torch.zeros(2, 16, 576, dtype=torch.bfloat16), torch.zeros(2, 8, dtype=torch.int32)
        out, rows = torch.empty(2, 16, 512, dtype=torch.bfloat16), torch.empty(8, 576, dtype=torch.bfloat16)
        with torch.inference_mode():
            inference_out = torch.empty(2, 16, 512, dtype=torch.bfloat16)
        ops.attend(q, topk, cache, sm_scale=SM, out=out)  # good calls first: their signatures are kept
        ops.gather(cache, topk[0], out=rows)
        ops.write(x[:2, :512], x[:2, 512:], torch.arange(2), cache, capture_max_abs=torch.zeros(1))
        grad = "it requires grad, and PyTorch lets no such tensor be written in place"
        cases = [
            (lambda: ops.attend(q, topk, cache, sm_scale=SM, out=out.clone().requires_grad_()), "out: " + grad),
            (lambda: ops.gather(cache, topk[0], out=rows.clone().requires_grad_()), "out: " + grad),
            (lambda: ops.write(x[:2, :512], x[:2, 512:], torch.arange(2), cache,
                               capture_max_abs=torch.zeros(1, requires_grad=True)), "capture_max_abs: " + grad),
            (lambda: ops.attend(q, topk, cache, sm_scale=SM, out=inference_out),
             "out: it is an inference tensor, which PyTorch lets be written only inside torch.inference_mode()"),
        ]
        for call, words in cases:
            assert shim_refusal(call).startswith(words)
        with torch.inference_mode():  # where PyTorch lets it be written, so do the ops
            ops.attend(q, topk, cache, sm_scale=SM, out=inference_out)
        assert torch.equal(inference_out, out)


@needs_torch
def test_ops_should_refuse_a_closed_or_unknown_context(plugin, torch_ops):
    ctx = nvfp4_mla.Context(plugin)
    ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
    cache, _ = sample_cache(ops, "cpu")
    cid = ops.context_id
    assert torch_ops.context_id(ctx) == cid  # one id per context
    ctx.close()
    words = (f"nvfp4_mla.gather: context {cid} is not an open nvfp4_mla.Context (take the id from "
             "nvfp4_mla.torch_ops.context_id(ctx) or bind(ctx, ...), and keep ctx open)")
    with pytest.raises(ValueError) as exc:
        ops.gather(cache, torch.zeros(4, dtype=torch.int32))
    assert str(exc.value) == words
    del ops, ctx, exc  # the traceback holds the frames that held ctx
    import gc
    gc.collect()
    assert cid not in torch_ops._contexts  # held weakly: gone with the context
    with pytest.raises(ValueError, match=f"context {cid} is not an open"):
        torch.ops.nvfp4_mla.gather(cache, torch.zeros(4, dtype=torch.int32), cid, LAYOUT_FP8_ROPE_368,
                                   SCALE_PER_TOKEN, 0.0)


@needs_torch
def test_ops_should_refuse_integers_their_fields_cannot_hold(plugin, torch_ops):
    """Issue 48, case 5: layout=2**40+1 went to the uint32 field as 1. The ops' schema takes an int64;
    the shim refuses what the field cannot hold, by name, and a wrong dtype after a kept signature is a
    new signature, checked in full."""
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cache, x = sample_cache(ops, "cpu")
        slots = torch.arange(4, dtype=torch.int32)
        with pytest.raises(ValueError, match="layout=1099511627777: out of range, must be in \\[0, 4294967295\\]"):
            torch.ops.nvfp4_mla.gather(cache, slots, ops.context_id, 2**40 + 1, SCALE_PER_TOKEN, 0.0)
        with pytest.raises(ValueError, match="writer_policy=4294967297: out of range"):
            torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, writer_policy=2**32 + 1)
        out = torch.empty(4, 576, dtype=torch.bfloat16)
        ops.gather(cache, slots, out=out)  # its signature is kept
        with pytest.raises(nvfp4_mla.ArrayError, match="out: dtype u8, expected bf16"):
            ops.gather(cache, slots, out=torch.empty(4, 576, dtype=torch.uint8))


@needs_torch
@pytest.mark.parametrize("dtype", ["int16", "uint16"])
def test_torch_integer_tensors_should_be_refused_not_read_as_bf16_bits(plugin, torch_ops, dtype):
    """bad-inputs-4 N10: PyTorch has torch.bfloat16, so an int16 / uint16 tensor holds integers (numpy's
    uint16 convention for bf16 bits is numpy's alone); the one-shot call, the bound op and the raw op
    refuse it, naming the argument and the dtype, and write nothing."""
    dtype = getattr(torch, dtype)
    words = f"kv_c: dtype {dtype} holds integers, not bf16: pass a torch.bfloat16 tensor"
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        x = (torch.randn(8, 576) * 1000).to(dtype)
        cache = torch.zeros(1, 64, 368, dtype=torch.uint8)
        slots = torch.arange(8)
        for call in (lambda: ctx.write(x[:, :512], x[:, 512:], slots, cache, layout=LAYOUT_FP8_ROPE_368,
                                       scale_mode=SCALE_PER_TOKEN),
                     lambda: ops.write(x[:, :512], x[:, 512:], slots, cache),
                     lambda: torch.ops.nvfp4_mla.write(x[:, :512], x[:, 512:], slots, cache, ops.context_id,
                                                       LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 0.0)):
            assert shim_refusal(call).startswith(words)
        assert int(cache.count_nonzero()) == 0
        q = torch.zeros(2, 16, 576, dtype=dtype)
        assert shim_refusal(lambda: ops.attend(q, torch.zeros(2, 8, dtype=torch.int32), cache, sm_scale=SM)) \
            .startswith(f"q: dtype {dtype} holds integers")


@needs_torch
def test_bound_ops_should_refuse_a_string_or_a_bool_as_a_scale(plugin, torch_ops):
    """bad-inputs-4 N11: float("0.5") and float(True) passed; the bound ops refuse them by name, in the
    words Context's calls use."""
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, nvfp4_mla.CacheFormat(fp8_rope=True).open(plugin))
        kv = torch.zeros(8, 576, dtype=torch.bfloat16)
        cache = torch.zeros(1, 64, 368, dtype=torch.uint8)
        q, topk = torch.zeros(2, 16, 576, dtype=torch.bfloat16), torch.zeros(2, 8, dtype=torch.int32)
        for value in ("0.5", True, np.bool_(True)):
            words = f"outer_scale={value!r}: expected a number"
            with pytest.raises(TypeError) as exc:
                ctx.write(kv[:, :512], kv[:, 512:], torch.arange(8), cache, layout=LAYOUT_FP8_ROPE_368,
                          scale_mode=SCALE_STATIC, outer_scale=value)
            assert str(exc.value) == words
            for call in (lambda: ops.write(kv[:, :512], kv[:, 512:], torch.arange(8), cache, outer_scale=value),
                         lambda: ops.gather(cache, topk[0], outer_scale=value),
                         lambda: ops.attend(q, topk, cache, sm_scale=SM, outer_scale=value)):
                with pytest.raises(TypeError) as exc:
                    call()
                assert str(exc.value) == words
            with pytest.raises(TypeError, match=f"^sm_scale={value!r}: expected a number$"):
                ops.attend(q, topk, cache, sm_scale=value)
        assert int(cache.count_nonzero()) == 0
        ops.write(kv[:, :512], kv[:, 512:], torch.arange(8), cache, outer_scale=np.float32(0.5))  # a number is one


@needs_torch
def test_attend_fake_should_refuse_what_only_the_plugin_checks(plugin, torch_ops):
    """The fake (meta) attend asks the plugin's shape-only entry on placeholders: what only the plugin
    checks (h in 1..128, sm_scale > 0) is refused while tracing, in its words, with no memory read; a
    good call gives the outputs' shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cid = ops.context_id
        with FakeTensorMode():
            q = torch.empty(2, 129, 576, dtype=torch.bfloat16)
            topk = torch.empty(2, 8, dtype=torch.int32)
            cache = torch.empty(1, 64, 368, dtype=torch.uint8)
            attend = torch.ops.nvfp4_mla.attend
            with pytest.raises(nvfp4_mla.InvalidArgument, match=r"attend: q: h = shape\[1\] is 129\b"):
                attend(q, topk, cache, cid, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 0.0, SM)
            with pytest.raises(nvfp4_mla.InvalidArgument, match="attend: sm_scale is -1, must be finite and > 0"):
                attend(q[:, :16], topk, cache, cid, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 0.0, -1.0)
            out, lse = attend(q[:, :16], topk, cache, cid, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 0.0, SM)
            assert out.shape == (2, 16, 512) and out.dtype == torch.bfloat16 and lse.shape == (2, 16)


@needs_torch
def test_ops_bound_to_a_calibrated_configuration_should_need_each_layers_scale(plugin, torch_ops, profile_path):
    """Issue 48, case 10: snippets that left outer_scale out ran a calibrated deployment at 1.0."""
    cfg = nvfp4_mla.CacheFormat(fp8_rope=True, scales_file=profile_path).open(plugin)
    try:
        with nvfp4_mla.Context(plugin) as ctx:
            ops = torch_ops.bind(ctx, cfg)
            x = torch.randn(64, 576).to(torch.bfloat16)
            cache = torch.zeros(1, 64, 368, dtype=torch.uint8)
            with pytest.raises(ValueError, match="write: the bound configuration is calibrated \\(78 layers"):
                ops.write(x[:, :512], x[:, 512:], torch.arange(64), cache)
            ops.write(x[:, :512], x[:, 512:], torch.arange(64), cache, outer_scale=cfg.layer_scale(3))
            assert ops.gather(cache, torch.arange(4, dtype=torch.int32), outer_scale=cfg.layer_scale(3)).shape == (4, 576)
    finally:
        cfg.close()


@needs_torch
def test_bind_should_take_the_start_up_configuration(plugin, torch_ops):
    cfg = nvfp4_mla.CacheFormat(fp8_rope=True).open(plugin)
    with nvfp4_mla.Context(plugin) as ctx:
        ops = torch_ops.bind(ctx, cfg)
        assert (ops.layout, ops.scale_mode, ops.writer_policy) == (cfg.layout, cfg.scale_mode, cfg.writer_policy)
        assert torch_ops.bind(ctx, cfg, writer_policy="mse").writer_policy == nvfp4_mla._abi.WRITER_POLICY_MSE
        with pytest.raises(ValueError, match="give a PluginConfig or both layout= and scale_mode="):
            torch_ops.bind(ctx)
    cfg.close()


# ---- torch.compile. ----

def decode_step(ops):
    """One layer's decode step as an engine writes it: the step's tokens into the cache, then attend over
    two shares of each query's top-k merged into one (what decode context parallelism does across
    ranks), and the new tokens read back."""
    def step(kv, slot_mapping, q, topk_a, topk_b, cache):
        ops.write(kv[:, :512], kv[:, 512:], slot_mapping, cache)
        out_a, lse_a = ops.attend(q, topk_a, cache, sm_scale=SM)
        out_b, lse_b = ops.attend(q, topk_b, cache, sm_scale=SM)
        out, lse = ops.merge(torch.stack([out_a, out_b]), torch.stack([lse_a, lse_b]))
        return out_a, lse_a, out, lse, ops.gather(cache, slot_mapping.to(torch.int32))
    return step


def step_inputs(device, batch, heads, tokens, topk, seed):
    g = torch.Generator().manual_seed(seed)
    first = tokens - 4 * batch + (seed % 4) * batch  # appended after the history, a new place each step
    slot_mapping = torch.arange(first, first + batch)
    topk_a = torch.randint(-1, tokens, (batch, topk), generator=g, dtype=torch.int32)
    topk_a[:, :batch] = slot_mapping.to(torch.int32)  # every query reads what this step wrote
    topk_b = torch.randint(-1, tokens, (batch, topk), generator=g, dtype=torch.int32)
    args = (torch.randn(batch, 576, generator=g).to(torch.bfloat16), slot_mapping,
            torch.randn(batch, heads, 576, generator=g).to(torch.bfloat16), topk_a, topk_b)
    return tuple(a.to(device) for a in args)


def assert_same_bits(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{what}: output {i}"
        assert torch.equal(g.view(torch.uint8), w.view(torch.uint8)), f"{what}: output {i} differs"


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_compiled_decode_step_should_equal_eager_bit_for_bit(plugin, torch_ops, device):
    with nvfp4_mla.Context(plugin, "cuda:0" if device == "cuda" else "cpu") as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        tokens, heads, topk = (4096, 16, 2048) if device == "cuda" else (1024, 16, 64)
        cache, _ = sample_cache(ops, device, tokens=tokens)
        eager_cache = cache.clone()
        step = decode_step(ops)
        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)  # a graph break would raise here
        for s in range(3):
            inputs = step_inputs(device, 4, heads, tokens, topk, seed=s)
            got = compiled(*inputs, cache)
            want = step(*inputs, eager_cache)
            assert torch.equal(cache, eager_cache), f"step {s}: cache bytes differ"
            assert_same_bits(got, want, f"step {s}")
        print(f"\ntorch.compile(fullgraph=True) on {device} ({ctx.device_name}): write, attend x2, merge, gather "
              "equal eager bit for bit over 3 steps of new data")


# ---- CUDA graphs. ----

def history(ops, device="cuda"):
    """A 4096-token cache on `device` and the eager twin the checks compare against."""
    cache, _ = sample_cache(ops, device, tokens=4096, seed=3)
    return cache, cache.clone()


@needs_cuda
@pytest.mark.parametrize("batch", [1, 8])
def test_reduce_overhead_step_should_replay_new_data_like_eager(plugin, torch_ops, monkeypatch, batch):
    """mode="reduce-overhead": the first call warms up, the second records a CUDA graph (the ops run
    under capture), later calls replay it without running the ops' Python at all."""
    from torch._dynamo.utils import counters
    calls = []
    run = torch_ops._Signature.run

    def counted(self, tensors, stream):
        calls.append(torch.cuda.is_current_stream_capturing())
        return run(self, tensors, stream)

    monkeypatch.setattr(torch_ops._Signature, "run", counted)
    with nvfp4_mla.Context(plugin, "cuda:0") as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cache, eager_cache = history(ops)
        torch._dynamo.mark_static_address(cache)  # the cache lives at one address, as an engine's does
        step = decode_step(ops)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
        previous = None
        for s in range(6):
            inputs = step_inputs("cuda", batch, 16, 4096, 2048, seed=s)
            got = [t.clone() for t in compiled(*inputs, cache)]  # a replay overwrites its outputs
            want = step(*inputs, eager_cache)
            torch.cuda.synchronize()
            assert torch.equal(cache, eager_cache), f"step {s}: cache bytes differ"
            assert_same_bits(got, want, f"step {s}")
            assert previous is None or not torch.equal(previous, got[0]), "the replay must read the new data"
            previous = got[0]
            if s == 2:
                ran = len(calls)
        assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
        assert any(calls), "the ops ran under capture when the graph was recorded"
        assert ran == len(calls) - 3 * 5, "replays run no Python: only the 3 eager steps' 5 op calls each"
        assert not ctx.workspace.kept_streams, "the ops never grow the context's workspace"
        print(f"\nreduce-overhead on {ctx.device_name}, batch {batch}: recorded ({sum(calls)} op calls captured), "
              "3 replays with new data equal eager bit for bit, no cudagraph skip, no op Python per replay")


@needs_cuda
@pytest.mark.parametrize("batch", [1, 8])
def test_hand_captured_ops_should_replay_new_data_like_eager(plugin, torch_ops, batch):
    """The ops captured in torch.cuda.graph on a side stream (no torch.compile); one query over 2048
    entries splits its top-k, so the captured attend needs scratch: the graph's own, not the context's."""
    with nvfp4_mla.Context(plugin, "cuda:0") as ctx:
        ops = torch_ops.bind(ctx, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
        cache, eager_cache = history(ops)
        buffers = [torch.empty_like(t) for t in step_inputs("cuda", batch, 16, 4096, 2048, seed=0)]
        kv, slot_mapping, q, topk, _ = buffers
        out, lse = torch.empty(batch, 16, 512, dtype=torch.bfloat16, device="cuda"), torch.empty(batch, 16,
                                                                                                   device="cuda")
        side = torch.cuda.Stream()
        for t, v in zip(buffers, step_inputs("cuda", batch, 16, 4096, 2048, seed=0)):
            t.copy_(v)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: the kept structs are made outside the capture
            ops.write(kv[:, :512], kv[:, 512:], slot_mapping, eager_cache.clone())
            ops.attend(q, topk, cache, sm_scale=SM, out=out, lse=lse)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            ops.write(kv[:, :512], kv[:, 512:], slot_mapping, cache)
            ops.attend(q, topk, cache, sm_scale=SM, out=out, lse=lse)
        assert torch.equal(cache, eager_cache), "capturing must not run the calls"
        for s in range(1, 4):
            for t, v in zip(buffers, step_inputs("cuda", batch, 16, 4096, 2048, seed=s)):
                t.copy_(v)
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                graph.replay()
            side.synchronize()
            ops.write(kv[:, :512], kv[:, 512:], slot_mapping, eager_cache)
            want = ops.attend(q, topk, eager_cache, sm_scale=SM)
            torch.cuda.synchronize()
            assert torch.equal(cache, eager_cache), f"step {s}: cache bytes differ"
            assert_same_bits((out, lse), want, f"step {s}")
        assert not ctx.workspace.kept_streams, "the ops never grow the context's workspace"
        del graph
        torch.cuda.synchronize()
        print(f"\ntorch.cuda.graph of the ops on {ctx.device_name}, batch {batch}: 3 replays with new data equal "
              "eager bit for bit")
