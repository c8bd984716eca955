"""nvfp4_mla.vllm_plugin without vLLM or PyTorch: the package imports neither, the names and sizes it
registers, the entry point the package's own build backend writes, and the one decision a serving
process makes from its environment and the plugin (the refusals, in words that name the setting or
the missing capability). The vLLM side is the contract suite (host_shims/python/tests_vllm/, run by
.ci/vllm-contract against the real vllm wheel)."""
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import replace

import pytest

import nvfp4_mla
from nvfp4_mla import _abi
from nvfp4_mla.vllm_plugin import serving

SHIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D368, D432 = serving.DTYPE_368, serving.DTYPE_432


@pytest.fixture(scope="module")
def plugin_file():
    """The build's plugin (NVFP4_MLA_PLUGIN_PATH, as the shim suite sets it), else NVFP4_MLA_PLUGIN."""
    path = os.environ.get("NVFP4_MLA_PLUGIN_PATH") or os.environ.get(_abi.PLUGIN_ENV)
    if not path:
        pytest.skip("no plugin: run through `meson test --suite shim` or set NVFP4_MLA_PLUGIN")
    return path


def decide(plugin_file, **settings):
    return serving.decide({_abi.PLUGIN_ENV: plugin_file, **settings})


def as_gpu_build(decision):
    """The decision a GPU build of the same plugin gives: backend.cuda compiled, an sm_90a image."""
    return replace(decision, caps=decision.caps | _abi.CAP["backend.cuda"], archs=((9, 0),))


def test_importing_the_plugin_package_should_import_neither_vllm_nor_torch():
    code = ("import sys, nvfp4_mla.vllm_plugin, nvfp4_mla.vllm_plugin.serving\n"
            "print(sorted(m for m in ('vllm', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SHIM), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_names_should_be_vllms_kind_and_not_upstreams_nvfp4_ds_mla():
    for name in (D368, D432):
        assert name.startswith("nvfp4") and name.endswith("_ds_mla")  # vLLM's rule for MLA models
        assert name != serving.PLUGIN_CACHE_DTYPE  # upstream 0.33's 352-byte SM100 record has that name
    assert serving.PLUGIN_CACHE_DTYPE == "nvfp4_ds_mla" == _abi.RECORD_FORMAT
    assert serving.DTYPES == {D368: nvfp4_mla.LAYOUT_FP8_ROPE_368, D432: nvfp4_mla.LAYOUT_BF16_ROPE_432}
    assert serving.BACKEND_PATH.startswith("nvfp4_mla.vllm_plugin.backend.")


def test_sizes_should_be_counted_as_the_engine_stores_them():
    assert (serving.record_bytes(D368), serving.record_bytes(D432), serving.record_bytes("fp8_ds_mla")) == (368, 432, 0)
    assert serving.capacity_gain(D368) == pytest.approx((656 + 132) / (368 + 132))
    assert round(serving.capacity_gain(D368), 2) == 1.58 and round(serving.capacity_gain(D368, False), 2) == 1.78
    assert round(serving.capacity_gain(D432), 2) == 1.40 and round(serving.capacity_gain(D432, False), 2) == 1.52


def test_cuda_archs_should_parse_to_capabilities():
    assert serving.parse_cuda_archs("sm_90a,sm_100a,sm_120a") == ((9, 0), (10, 0), (12, 0))
    assert serving.parse_cuda_archs("sm_90") == ((9, 0),)
    assert serving.parse_cuda_archs("") == () and serving.parse_cuda_archs(None) == ()


def test_the_build_backend_should_write_the_entry_point_and_the_vllm_extra(tmp_path):
    sys.path.insert(0, os.path.join(SHIM, "_build"))
    try:
        import nvfp4_mla_build as backend
    finally:
        sys.path.pop(0)
    cwd = os.getcwd()
    os.chdir(SHIM)
    try:
        wheel = backend.build_wheel(str(tmp_path))
        info = backend.prepare_metadata_for_build_wheel(str(tmp_path / "meta"))
    finally:
        os.chdir(cwd)
    with zipfile.ZipFile(tmp_path / wheel) as z:
        entry = z.read(f"{info}/entry_points.txt").decode()
        metadata = z.read(f"{info}/METADATA").decode()
        assert "nvfp4_mla/vllm_plugin/serving.py" in z.namelist()
    assert entry == "[vllm.general_plugins]\nnvfp4_mla = nvfp4_mla.vllm_plugin:register\n\n"
    assert (tmp_path / "meta" / info / "entry_points.txt").read_text() == entry
    assert 'Requires-Dist: vllm==0.33.*; extra == "vllm"' in metadata
    assert not any(line.startswith("Requires-Dist: vllm") and "extra" not in line for line in metadata.splitlines())


def test_a_serving_environment_should_be_decided_once_with_the_plugins_identity(plugin_file):
    decision = decide(plugin_file, KV_FP8_ROPE="1", VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")
    assert decision.error == ""
    assert (decision.layout, decision.scale_mode) == (nvfp4_mla.LAYOUT_FP8_ROPE_368, nvfp4_mla.SCALE_PER_TOKEN)
    assert decision.identity == "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"
    assert decision.layer_scale(3) is None  # per token: each record carries its own
    gpu = as_gpu_build(decision)
    assert gpu.refusal(D368) is None and gpu.refusal(D368, (9, 0)) is None
    static = decide(plugin_file)  # nothing set: the 432-byte record, static scale 1.0
    assert (static.layout, static.scale_mode, static.identity) == (nvfp4_mla.LAYOUT_BF16_ROPE_432,
                                                                   nvfp4_mla.SCALE_STATIC, "vllm-default-v1")
    assert static.layer_scale(0) == 1.0 and as_gpu_build(static).refusal(D432) is None


def test_calibrated_scales_should_reach_each_layer(plugin_file, tmp_path):
    scales = tmp_path / "scales.json"
    scales.write_text(json.dumps({"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": 3, "latent_dim": 512,
                                  "denominator": 2688.0, "scales": [0.5, 0.25, 0.125]}))
    decision = decide(plugin_file, KV_FP8_ROPE="1", VLLM_NVFP4_MLA_SCALES_FILE=f" {scales}\n")  # vLLM strips it
    assert decision.error == "" and decision.scale_mode == nvfp4_mla.SCALE_STATIC
    assert [decision.layer_scale(i) for i in range(4)] == [0.5, 0.25, 0.125, 1.0]  # an MTP layer past them: 1.0
    assert decision.identity.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:")


def test_a_dtype_the_environment_disagrees_with_should_be_refused_naming_the_fix(plugin_file):
    decision = as_gpu_build(decide(plugin_file, KV_FP8_ROPE="1"))
    words = decision.refusal(D432)
    assert words == (f"--kv-cache-dtype {D432} asks for 432-byte records, but the environment (KV_FP8_ROPE='1') "
                     f"selects the 368-byte layout (fp8_rope_368): unset KV_FP8_ROPE, or serve --kv-cache-dtype {D368}")
    words = as_gpu_build(decide(plugin_file)).refusal(D368)
    assert words == (f"--kv-cache-dtype {D368} asks for 368-byte records, but the environment (KV_FP8_ROPE unset) "
                     "selects the 432-byte layout (bf16_rope_432): set KV_FP8_ROPE=1, or serve "
                     f"--kv-cache-dtype {D432}")
    assert "reads only nvfp4_mla368_ds_mla and nvfp4_mla432_ds_mla caches" in decision.refusal("nvfp4_ds_mla")


def test_what_cannot_be_served_should_be_refused_in_the_plugins_words(plugin_file):
    bad = decide(plugin_file, KV_FP8_ROPE="on")
    assert bad.refusal(D368) == ('NVFP4_MLA_SPARSE cannot serve nvfp4_mla368_ds_mla: KV_FP8_ROPE="on" is not a '
                                 "boolean: use 1 or true for on, 0 or false for off (any case); unset or empty is off "
                                 "[CONFIG]")
    assert "per-token" in decide(plugin_file, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1").error  # needs the 368 layout
    missing = serving.decide({"KV_FP8_ROPE": "1"})
    assert "no nvfp4-mla plugin selected (set NVFP4_MLA_PLUGIN" in missing.refusal(D368)
    gone = serving.decide({_abi.PLUGIN_ENV: "/nonexistent/libnvfp4_mla.so", "KV_FP8_ROPE": "1"})
    assert "cannot load nvfp4-mla plugin /nonexistent/libnvfp4_mla.so" in gone.refusal(D368)
    cpu = replace(decide(plugin_file, KV_FP8_ROPE="1"), caps=decide(plugin_file).caps & ~_abi.CAP["backend.cuda"])
    words = cpu.refusal(D368)
    assert f"nvfp4-mla plugin {cpu.plugin_path} (ABI" in words and "missing backend.cuda" in words
    gpu = as_gpu_build(decide(plugin_file, KV_FP8_ROPE="1"))
    assert gpu.refusal(D368, (8, 0)) == (f"NVFP4_MLA_SPARSE: nvfp4-mla plugin {gpu.plugin_path} holds CUDA code for "
                                         "sm_90; this GPU is sm_80 (compute capability 8.0)")
    no_cuda = replace(gpu, archs=())
    assert "holds CUDA code for none (a CPU-only build)" in no_cuda.refusal(D368, (9, 0))


def test_the_process_decision_should_be_made_once_and_replaceable(plugin_file, monkeypatch):
    previous = serving.install(None)
    try:
        monkeypatch.setenv(_abi.PLUGIN_ENV, plugin_file)
        monkeypatch.setenv("KV_FP8_ROPE", "1")
        first = serving.current()
        monkeypatch.setenv("KV_FP8_ROPE", "0")  # read once: a later change is not seen
        assert serving.current() is first and first.layout == nvfp4_mla.LAYOUT_FP8_ROPE_368
        other = decide(plugin_file)
        assert serving.install(other) is first and serving.current() is other
    finally:
        serving.install(previous)


def _serve_check():
    """tools/vllm-serve-check as a module (it runs engines only when executed)."""
    import importlib.machinery
    import importlib.util
    path = os.path.join(SHIM, "..", "..", "tools", "vllm-serve-check")
    loader = importlib.machinery.SourceFileLoader("vllm_serve_check", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("vllm_serve_check", loader))
    loader.exec_module(module)
    return module


def _engine_result(name, blocks, logprob, written=None, worker=True):
    requests = [{"prompt_len": n, "tokens": list(range(24)), "prompt_logprobs": [logprob] * (n - 1),
                 "logprobs": [logprob] * 24} for n, _ in ((700, 0), (300, 0))]
    result = {"case": name, "num_gpu_blocks": blocks, "requests": requests}
    if worker:
        layer = {"written": (700 + 23 + 300 + 23) if written is None else written, "pad_zero": True,
                 "no_nan_codes": True, "token_scales_positive": True}
        result["worker"] = {"backends": ["NVFP4_MLA_SPARSE"], "wrapped": True, "layers": {"layer.0": layer}}
    return result


def test_the_serve_check_should_pass_consistent_engines_and_name_each_failure():
    check = _serve_check()
    good = {"nvfp4-368": _engine_result("nvfp4-368", 15762, -8.300),
            "nvfp4-368-eager": _engine_result("nvfp4-368-eager", 15762, -8.305),
            "nvfp4-432": _engine_result("nvfp4-432", 13975, -8.31),
            "bf16": _engine_result("bf16", 1, -8.310, worker=False),
            "fp8": _engine_result("fp8", 10001, -8.312, worker=False)}
    lines, failures = check.compare(good, mtp=False)
    assert failures == [], failures
    assert any("1.576x (pages say 1.576x)" in line for line in lines), lines
    bad = dict(good, **{"nvfp4-432": _engine_result("nvfp4-432", 9000, float("nan"), written=5),
                        "nvfp4-368-eager": {"error": "Traceback: ValueError: Selected backend"}})
    _, failures = check.compare(bad, mtp=False)
    assert any("nvfp4-432: a logprob is not finite" in f for f in failures)
    assert any("5 records written, 1046 tokens went through" in f for f in failures)
    assert any("nvfp4-432: 9000 blocks" in f for f in failures)
    assert any("nvfp4-368-eager: the engine failed" in f for f in failures)
