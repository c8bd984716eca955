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
    assert 'Requires-Dist: vllm<0.35,>=0.33; extra == "vllm"' in metadata or \
        'Requires-Dist: vllm>=0.33,<0.35; extra == "vllm"' in metadata  # 0.33 and 0.34
    assert not any(line.startswith("Requires-Dist: vllm") and "extra" not in line for line in metadata.splitlines())


@pytest.fixture
def logged(caplog):
    """The plugin's lines, captured (serving.set_log to a logger that reaches caplog)."""
    import logging
    previous = serving.set_log(logging.getLogger("nvfp4_mla.test_vllm_serving"))
    caplog.set_level(logging.DEBUG, logger="nvfp4_mla.test_vllm_serving")
    yield caplog
    serving.set_log(previous)


def calibration(tmp_path, scales, model=None, name="scales.json"):
    data = {"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": len(scales), "latent_dim": 512,
            "denominator": 2688.0, "scales": scales}
    if model:
        data["model"] = model
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_a_serving_environment_should_be_decided_once_with_the_plugins_identity(plugin_file):
    decision = decide(plugin_file, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")
    assert decision.error == ""
    plan = decision.plan(D368)
    assert (plan.layout, plan.scale_mode) == (nvfp4_mla.LAYOUT_FP8_ROPE_368, nvfp4_mla.SCALE_PER_TOKEN)
    assert plan.identity == "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"
    assert plan.layer_scale(3) is None  # per token: each record carries its own
    assert decision.plan(D368) is plan  # made once a dtype and model
    gpu = as_gpu_build(decision)
    assert gpu.refusal(D368) is None and gpu.refusal(D368, (9, 0)) is None


def test_the_dtype_name_should_choose_the_layout_and_kv_fp8_rope_only_cross_check(plugin_file):
    """N5: the name says 368 or 432; KV_FP8_ROPE is not needed, and refused only when it contradicts."""
    gpu = as_gpu_build(decide(plugin_file))  # nothing set
    assert gpu.plan(D368).layout == nvfp4_mla.LAYOUT_FP8_ROPE_368 and gpu.refusal(D368, (9, 0)) is None
    assert gpu.plan(D432).layout == nvfp4_mla.LAYOUT_BF16_ROPE_432
    agreeing = as_gpu_build(decide(plugin_file, KV_FP8_ROPE="1"))
    assert agreeing.refusal(D368, (9, 0)) is None
    assert agreeing.refusal(D432) == (f"--kv-cache-dtype {D432} asks for 432-byte records, but KV_FP8_ROPE='1' says "
                                      "368-byte records: unset KV_FP8_ROPE (the dtype name chooses the layout), or "
                                      f"serve --kv-cache-dtype {D368}")
    off = as_gpu_build(decide(plugin_file, KV_FP8_ROPE="0"))
    assert "but KV_FP8_ROPE='0' says 432-byte records: unset KV_FP8_ROPE" in off.refusal(D368)
    assert as_gpu_build(decide(plugin_file, KV_FP8_ROPE="")).refusal(D368, (9, 0)) is None  # empty is unset
    assert "reads only nvfp4_mla368_ds_mla and nvfp4_mla432_ds_mla caches" in gpu.refusal("nvfp4_ds_mla")


def test_no_scale_source_should_serve_per_token_on_368_and_say_so_at_info(plugin_file, logged):
    """N1: the README's command (nothing calibrates) no longer serves every layer at 1.0 silently."""
    import logging
    plan = decide(plugin_file).plan(D368)
    assert plan.error == "" and plan.scale_mode == nvfp4_mla.SCALE_PER_TOKEN
    assert plan.identity == "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1" and plan.layer_scale(0) is None
    infos = [r.getMessage() for r in logged.records if r.levelno == logging.INFO]
    assert any("no calibration" in m and "per-token outer scales" in m for m in infos), infos
    # A misspelt scales variable lands there too, and is named in a warning.
    typo = decide(plugin_file, VLLM_NVFP4_MLA_SCALE_FILE="/x/s.json")
    assert typo.plan(D368).scale_mode == nvfp4_mla.SCALE_PER_TOKEN
    assert any(level == nvfp4_mla._abi.LOG_WARN and "VLLM_NVFP4_MLA_SCALE_FILE is not a variable" in line
               and "did you mean VLLM_NVFP4_MLA_SCALES_FILE" in line for level, line in typo.notes), typo.notes
    assert decide(plugin_file, NVFP4_MLA_PLUGIN_PATH=plugin_file).notes == ()  # the build's own variable


def test_no_scale_source_should_refuse_432_unless_uncalibrated_is_asked_for_and_warned(plugin_file, logged):
    """N1: the 432-byte record has no per-token mode: refused with the fix, or 1.0 by opt-in (WARNING)."""
    import logging
    words = as_gpu_build(decide(plugin_file)).refusal(D432, (9, 0))
    assert words.startswith(f"NVFP4_MLA_SPARSE cannot serve {D432}: no outer scales")
    assert "VLLM_NVFP4_MLA_SCALES_FILE=<file>" in words and f"serve --kv-cache-dtype {D368}" in words
    assert "NVFP4_MLA_UNCALIBRATED=1" in words
    opted = as_gpu_build(decide(plugin_file, NVFP4_MLA_UNCALIBRATED="1"))
    plan = opted.plan(D432)
    assert opted.refusal(D432, (9, 0)) is None and plan.scale_mode == nvfp4_mla.SCALE_STATIC
    assert plan.identity == "vllm-default-v1" and plan.layer_scale(5) == 1.0
    warnings = [r.getMessage() for r in logged.records if r.levelno == logging.WARNING]
    assert any("every layer's outer scale is 1.0 (NVFP4_MLA_UNCALIBRATED=1)" in m for m in warnings), warnings
    assert opted.plan(D368).scale_mode == nvfp4_mla.SCALE_STATIC  # asked for: static 1.0 on 368 as well
    maybe = decide(plugin_file, NVFP4_MLA_UNCALIBRATED="maybe")
    assert 'NVFP4_MLA_UNCALIBRATED="maybe" is not a boolean' in maybe.error


def test_calibrated_scales_should_reach_each_layer(plugin_file, tmp_path):
    path = calibration(tmp_path, [0.5, 0.25, 0.125])
    decision = decide(plugin_file, VLLM_NVFP4_MLA_SCALES_FILE=f" {path}\n")  # vLLM strips it
    plan = decision.plan(D368, serving.Model(name="m", layers=3, draft_layers=1))
    assert plan.error == "" and plan.scale_mode == nvfp4_mla.SCALE_STATIC
    assert [plan.layer_scale(i) for i in range(4)] == [0.5, 0.25, 0.125, 1.0]  # the MTP layer past them: 1.0
    assert plan.identity.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:")


def test_a_calibration_should_cover_the_models_attention_layers(plugin_file, tmp_path, logged):
    """N3: fewer layers than the model, or more than the model and its draft layers (another model's
    file), is refused naming the file; the draft layers may be covered or not."""
    short = calibration(tmp_path, [0.01], name="one.json")
    decision = as_gpu_build(decide(plugin_file, VLLM_NVFP4_MLA_SCALES_FILE=short))
    model = serving.Model(name="tiny-v32", layers=2, draft_layers=1)
    words = decision.refusal(D368, (9, 0), model)
    assert words == (f"NVFP4_MLA_SPARSE cannot serve {D368}: VLLM_NVFP4_MLA_SCALES_FILE={short} calibrates 1 layers, "
                     "but tiny-v32 has 2 attention layers (num_hidden_layers): layers 1..1 would run uncalibrated; "
                     "calibrate this model (nvfp4-mla calibrate), or give its own file")
    glm = os.path.join(SHIM, "..", "..", "data", "glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json")
    other = as_gpu_build(decide(plugin_file, VLLM_NVFP4_MLA_SCALES_FILE=glm))
    words = other.refusal(D368, (9, 0), model)
    assert "calibrates 78 layers, but tiny-v32 has 2 attention layers and 1 draft/MTP layers" in words
    assert "(made for 'madeby561/GLM-5.2-MXFP8-NVFP4-NF3-Hybrid" in words and "a file for another model" in words
    both = as_gpu_build(decide(plugin_file, VLLM_NVFP4_MLA_SCALES_FILE=calibration(tmp_path, [0.1, 0.2, 0.3])))
    assert both.refusal(D368, (9, 0), model) is None  # the draft layer calibrated too
    assert both.plan(D368, model).layer_scale(2) == pytest.approx(0.3)
    named = calibration(tmp_path, [0.1, 0.2], model="org/Another-Model", name="named.json")
    warned = as_gpu_build(decide(plugin_file, VLLM_NVFP4_MLA_SCALES_FILE=named))
    assert warned.refusal(D368, (9, 0), serving.Model(name="org/tiny-v32", layers=2)) is None
    assert any("was made for 'org/Another-Model', and this model is 'org/tiny-v32'" in r.getMessage()
               for r in logged.records), logged.text
    # Without the model (the environment alone), nothing to compare: the file is taken.
    assert decision.refusal(D368, (9, 0)) is None


def test_the_plugins_log_lines_should_reach_the_logger(plugin_file, tmp_path, logged):
    """N4: config_create's own warning (a checkpoint's calibration not used per token) is logged."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"nvfp4_mla_outer_scales": {
        "format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": 2, "latent_dim": 512, "denominator": 2688.0,
        "scales": [0.01, 0.02]}}))
    plan = decide(plugin_file, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1").plan(D368, serving.Model(folder=str(folder),
                                                                                          layers=2))
    assert plan.scale_mode == nvfp4_mla.SCALE_PER_TOKEN
    assert any("carries calibration" in r.getMessage() for r in logged.records), logged.text
    checkpoint = decide(plugin_file).plan(D368, serving.Model(folder=str(folder), name="ckpt", layers=2))
    assert [checkpoint.layer_scale(i) for i in (0, 1)] == [pytest.approx(0.01), pytest.approx(0.02)]
    assert checkpoint.identity.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:")
    assert any(f"cache identity {checkpoint.identity}" in r.getMessage() for r in logged.records)


def test_the_attention_settings_should_be_checked_at_start_up_without_a_gpu(plugin_file):
    """N9: read only by a CUDA context's init, they are refused by the decision, naming the variable."""
    bad = decide(plugin_file, NVFP4_MLA_ATTEND_MERGE="bogus")
    assert bad.error.startswith('NVFP4_MLA_ATTEND_MERGE="bogus" is not one of: auto, separate, in-launch')
    assert "NVFP4_MLA_ATTEND_MERGE" in as_gpu_build(bad).refusal(D368)
    assert 'NVFP4_MLA_ATTEND_SMEM_CAP="-5" is not' in decide(plugin_file, NVFP4_MLA_ATTEND_SMEM_CAP="-5").error
    assert decide(plugin_file, NVFP4_MLA_ATTEND_MERGE="in-launch", NVFP4_MLA_ATTEND_SMEM_CAP="65536").error == ""


def test_what_cannot_be_served_should_be_refused_in_the_plugins_words(plugin_file, tmp_path):
    bad = decide(plugin_file, KV_FP8_ROPE="on")
    assert bad.refusal(D368) == ('NVFP4_MLA_SPARSE cannot serve nvfp4_mla368_ds_mla: KV_FP8_ROPE="on" is not a '
                                 "boolean: use 1 or true for on, 0 or false for off (any case); unset or empty is off "
                                 "[CONFIG]")
    per_token = decide(plugin_file, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")
    assert per_token.refusal(D432) == (f"NVFP4_MLA_SPARSE cannot serve {D432}: VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 asks "
                                       "for per-token scales, which only the 368-byte record has: serve "
                                       f"--kv-cache-dtype {D368}, or unset VLLM_NVFP4_MLA_DYNAMIC_SCALE")
    both = decide(plugin_file, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1",
                  VLLM_NVFP4_MLA_SCALES_FILE=calibration(tmp_path, [0.1]))
    assert "VLLM_NVFP4_MLA_SCALES_FILE" in both.refusal(D368)  # the plugin's refusal of the two modes together
    missing = serving.decide({})
    assert "no nvfp4-mla plugin selected (set NVFP4_MLA_PLUGIN" in missing.refusal(D368)
    gone = serving.decide({_abi.PLUGIN_ENV: "/nonexistent/libnvfp4_mla.so"})
    assert "cannot load nvfp4-mla plugin /nonexistent/libnvfp4_mla.so" in gone.refusal(D368)
    cpu = replace(decide(plugin_file), caps=decide(plugin_file).caps & ~_abi.CAP["backend.cuda"])
    words = cpu.refusal(D368)
    assert f"nvfp4-mla plugin {cpu.plugin_path} (ABI" in words and "missing backend.cuda" in words
    assert not cpu.cuda_known  # N7: then the GPU is not the reason
    gpu = as_gpu_build(decide(plugin_file))
    assert gpu.cuda_known
    assert gpu.refusal(D368, (8, 0)) == (f"NVFP4_MLA_SPARSE: nvfp4-mla plugin {gpu.plugin_path} holds CUDA code for "
                                         "sm_90; this GPU is sm_80 (compute capability 8.0)")
    no_cuda = replace(as_gpu_build(decide(plugin_file)), archs=())
    assert "holds CUDA code for none (a CPU-only build)" in no_cuda.refusal(D368, (9, 0))


def test_the_process_decision_should_be_made_once_and_replaceable(plugin_file, monkeypatch):
    previous = serving.install(None)
    try:
        monkeypatch.setenv(_abi.PLUGIN_ENV, plugin_file)
        monkeypatch.setenv("NVFP4_MLA_WRITER_POLICY", "rtn")
        first = serving.current()
        monkeypatch.setenv("NVFP4_MLA_WRITER_POLICY", "bogus")  # read once: a later change is not seen
        assert serving.current() is first and first.error == ""
        other = decide(plugin_file)
        assert serving.install(other) is first and serving.current() is other
    finally:
        serving.install(previous)


def test_the_vllm_prefixed_variables_should_be_the_ones_registered_with_vllm():
    """N6: what register() adds to vLLM's known variables (tests_vllm checks vLLM's own check)."""
    assert serving.VLLM_PREFIXED == ("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "VLLM_NVFP4_MLA_SCALES_FILE")


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
