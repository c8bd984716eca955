"""Registration against the vLLM under test (0.33.0 or 0.34.0): the entry point through vLLM's own loader
(twice), the dtype names through CacheConfig, the CLI parser and VllmConfig, the backend through
AttentionBackendEnum and the selection by the dtype, the quant mode, the plugin's variables through
vLLM's environment check, and the refusals with their reasons (only the true ones)."""
import importlib.metadata
import logging
import os

import pytest
import torch

from contract import VERSION, VERSIONS, engine_config
from nvfp4_mla import _abi
from nvfp4_mla.vllm_plugin import serving

D368, D432 = serving.DTYPE_368, serving.DTYPE_432


def test_entry_point_should_load_through_vllms_loader_and_again_without_change(registered, caplog):
    from vllm import plugins
    from vllm.config.cache import KV_CACHE_DTYPES, STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.attention.backends.registry import _ATTN_OVERRIDES, AttentionBackendEnum

    found = [ep for ep in importlib.metadata.entry_points(group="vllm.general_plugins") if ep.name == "nvfp4_mla"]
    assert [ep.value for ep in found] == ["nvfp4_mla.vllm_plugin:register"]
    member = AttentionBackendEnum[serving.BACKEND_NAME]
    state = (list(KV_CACHE_DTYPES), dict(STR_DTYPE_TO_TORCH_DTYPE), member, _ATTN_OVERRIDES[member])
    assert D368 in KV_CACHE_DTYPES and D432 in KV_CACHE_DTYPES
    assert STR_DTYPE_TO_TORCH_DTYPE[D368] == torch.uint8
    plugins.plugins_loaded = False  # vLLM's once-a-process guard, lifted: register() itself must be idempotent
    with caplog.at_level(logging.WARNING):
        plugins.load_general_plugins()
    assert (list(KV_CACHE_DTYPES), dict(STR_DTYPE_TO_TORCH_DTYPE), AttentionBackendEnum[serving.BACKEND_NAME],
            _ATTN_OVERRIDES[member]) == state
    assert "already exists" not in caplog.text and "Failed to load plugin" not in caplog.text


def test_cache_dtype_should_be_quantized_as_nvfp4_ds_mla_not_the_custom_alias(registered):
    from vllm.config.cache import get_kv_cache_dtype_handler
    from vllm.v1.kv_cache_interface import KVQuantMode, get_kv_quant_mode, is_quantized_kv_cache

    # 0.33's and 0.34's CUSTOM has OCTAVE_K3V4's value: it *is* that member, and reads as Octave.
    assert KVQuantMode.CUSTOM is KVQuantMode.OCTAVE_K3V4 and KVQuantMode.CUSTOM.is_octave
    # 0.34 removed is_custom_mode; the plugin never asked it (its dtypes are NVFP4_DS_MLA).
    assert hasattr(KVQuantMode, "is_custom_mode") == (VERSION == "0.33.0")
    for name in (D368, D432):
        assert get_kv_cache_dtype_handler(name).torch_dtype() == torch.uint8
        assert get_kv_quant_mode(name) is KVQuantMode.NVFP4_DS_MLA
        assert is_quantized_kv_cache(name) and not get_kv_quant_mode(name).is_octave


def test_backend_enum_should_resolve_the_backend_class(registered):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseBackend

    member = AttentionBackendEnum[serving.BACKEND_NAME]
    assert member.get_path() == serving.BACKEND_PATH
    assert member.get_class() is NvFp4MlaSparseBackend
    assert NvFp4MlaSparseBackend.get_name() == serving.BACKEND_NAME
    assert NvFp4MlaSparseBackend.is_mla() and NvFp4MlaSparseBackend.is_sparse()


def test_dtype_names_should_pass_cache_config_the_cli_and_vllm_config(registered, serve, tiny_model):
    from vllm.config import CacheConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    serve()
    assert CacheConfig(cache_dtype=D368, block_size=64).cache_dtype == D368
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    common = ["--model", tiny_model, "--load-format", "dummy", "--skip-tokenizer-init", "--enforce-eager",
              "--max-model-len", "1024", "--kv-cache-dtype", D368]
    config = EngineArgs.from_cli_args(parser.parse_args(common)).create_engine_config()  # the shortest line
    assert config.cache_config.cache_dtype == D368 and config.attention_config.backend is None
    args = parser.parse_args(common + ["--attention-backend", serving.BACKEND_NAME, "--block-size", "64"])
    config = EngineArgs.from_cli_args(args).create_engine_config()  # the explicit one still works
    assert config.cache_config.cache_dtype == D368
    assert config.cache_config.block_size == 64
    assert config.attention_config.backend is AttentionBackendEnum[serving.BACKEND_NAME]


def test_a_name_without_ds_mla_should_be_refused_by_vllm_on_mla_models(registered, tiny_model):
    """Why the names end in _ds_mla: vLLM refuses any other nvfp4* dtype on an MLA model."""
    from vllm.config.cache import register_kv_cache_dtype
    from nvfp4_mla.vllm_plugin.hooks import CacheDtypeHandler

    # The plugin's own handler (uint8, NVFP4_DS_MLA) under a name without the suffix.
    register_kv_cache_dtype("nvfp4_mla368")(type("Bare", (CacheDtypeHandler,), {"name": "nvfp4_mla368"}))
    with pytest.raises(ValueError, match="nvfp4 KV cache is not supported with MLA"):
        engine_config(tiny_model, "nvfp4_mla368")


def _validate(dtype=D368, capability=(9, 0), block_size=64, **kw):
    from vllm.platforms.interface import DeviceCapability
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseBackend
    args = dict(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=dtype, block_size=block_size, use_mla=True,
                has_sink=False, use_sparse=True, use_mm_prefix=False, use_per_head_quant_scales=False,
                device_capability=DeviceCapability(*capability), attn_type="decoder")
    args.update(kw)
    return NvFp4MlaSparseBackend.validate_configuration(**args)


def test_validate_configuration_should_accept_sm90_and_refuse_the_rest_with_reasons(registered, serve, plugin_path):
    serve(KV_FP8_ROPE="1", VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")
    assert _validate() == []
    assert _validate(block_size=None) == []  # no --block-size: vLLM picks the backend's 64
    for cap in ((8, 0), (10, 0), (12, 0)):
        reasons = _validate(capability=cap)
        assert "compute capability not supported" in reasons
        assert any(f"this GPU is sm_{cap[0]}{cap[1]}" in r and "sm_90" in r for r in reasons), reasons
    reasons = _validate(dtype="fp8_ds_mla")
    assert "kv_cache_dtype not supported" in reasons
    assert any(f"reads only {D368} and {D432}" in r and "'fp8_ds_mla'" in r for r in reasons), reasons
    reasons = _validate(block_size=32)
    assert any("serve with --block-size 64, not 32" in r for r in reasons), reasons
    assert any("head_size" in r for r in _validate(head_size=512))
    assert "DCP not supported" in _validate(use_dcp=True)
    assert "PCP not supported" in _validate(use_pcp=True)
    # KV_FP8_ROPE, set, must agree with the dtype name: 432 bytes asked, KV_FP8_ROPE=1 says 368.
    reasons = _validate(dtype=D432)
    assert any(f"--kv-cache-dtype {D432} asks for 432-byte records" in r and "unset KV_FP8_ROPE" in r
               and f"--kv-cache-dtype {D368}" in r for r in reasons), reasons
    assert "compute capability not supported" not in reasons
    serve(KV_FP8_ROPE="1", VLLM_NVFP4_MLA_DYNAMIC_SCALE="1", cuda=False)  # a CPU-only build
    reasons = _validate()
    assert any("missing backend.cuda" in r and plugin_path in r for r in reasons), reasons


def test_environment_refusals_should_name_the_setting(registered, serve):
    serve(KV_FP8_ROPE="yes")
    assert any('KV_FP8_ROPE="yes" is not a boolean' in r for r in _validate())
    serve(VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")  # per-token scales need the 368-byte record
    reasons = _validate(dtype=D432)
    assert any("per-token" in r and "368" in r for r in reasons), reasons
    decision = serving.decide({"KV_FP8_ROPE": "1"})  # no NVFP4_MLA_PLUGIN
    serving.install(decision)
    assert any("no nvfp4-mla plugin selected (set NVFP4_MLA_PLUGIN" in r for r in _validate()), _validate()


@pytest.mark.parametrize("settings", [{"NVFP4_MLA_WRITER_POLICY": "4over6"}, {"NVFP4_MLA_PLUGIN": ""},
                                      {"NVFP4_MLA_PLUGIN": "/nonexistent/libnvfp4_mla.so"},
                                      {"VLLM_NVFP4_MLA_SCALES_FILE": "/dev/zero"}])
def test_a_refusal_should_give_only_its_true_reason(registered, serve, settings):
    """N7: on the SM90 the backend serves, a plugin-side refusal is not also "compute capability not
    supported" (the GPU is not the reason)."""
    serve(**settings)
    reasons = _validate()
    assert reasons and "compute capability not supported" not in reasons, reasons
    assert any(serving.BACKEND_NAME in r for r in reasons), reasons


def _selector(dtype=D368):
    from vllm.v1.attention.selector import AttentionSelectorConfig
    return AttentionSelectorConfig(head_size=576, dtype=torch.bfloat16, kv_cache_dtype=dtype, block_size=64,
                                   use_mla=True, use_sparse=True)


def test_the_dtype_should_choose_the_backend_where_vllms_own_lists_never_would(registered, serve, tiny_model):
    """N5: the platform's priority lists never name an out-of-tree backend (its selection alone fails);
    vLLM's selector, wrapped by register(), picks NVFP4_MLA_SPARSE for these dtypes when none is named,
    and keeps a backend that was named."""
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseBackend

    serve()
    member = AttentionBackendEnum[serving.BACKEND_NAME]
    with set_current_vllm_config(engine_config(tiny_model, D368)):
        assert current_platform.get_attn_backend_cls(member, _selector()) == serving.BACKEND_PATH
        with pytest.raises(ValueError, match="No valid attention backend"):
            current_platform.get_attn_backend_cls(None, _selector())  # vLLM's lists alone
        assert selector._cached_get_attn_backend.nvfp4_mla_original is not None
        chosen = selector.get_attn_backend(576, torch.bfloat16, D368, use_mla=True, use_sparse=True)
        assert chosen is NvFp4MlaSparseBackend
        assert selector.get_attn_backend(576, torch.bfloat16, "auto", use_mla=True, use_sparse=True) \
            is not NvFp4MlaSparseBackend  # other dtypes: vLLM's own choice
    with set_current_vllm_config(engine_config(tiny_model, D368, backend="FLASHMLA_SPARSE")):
        with pytest.raises(ValueError, match="FLASHMLA_SPARSE"):  # named: kept, and refused by vLLM
            selector.get_attn_backend(576, torch.bfloat16, D368, use_mla=True, use_sparse=True)
        with pytest.raises(ValueError, match="this GPU is sm_80"):
            type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: _cap(8, 0))
            try:
                current_platform.get_attn_backend_cls(member, _selector())
            finally:
                type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: _cap(9, 0))


def _cap(major, minor):
    from vllm.platforms.interface import DeviceCapability
    return DeviceCapability(major=major, minor=minor)


def test_record_sizes_and_capacity_should_be_counted_as_the_engine_stores_them():
    assert serving.record_bytes(D368) == 368 and serving.record_bytes(D432) == 432
    assert round(serving.capacity_gain(D368), 2) == 1.58  # (656 + 132) / (368 + 132)
    assert round(serving.capacity_gain(D368, indexer=False), 2) == 1.78  # 656 / 368
    assert _abi.record_bytes(_abi.LAYOUT_FP8_DS_MLA_656) == serving.FP8_DS_MLA_BYTES


def test_the_plugins_variables_should_pass_vllms_environment_check(registered, serve, tiny_model, monkeypatch):
    """N6: vLLM's --fail-on-environ-validation accepts the plugin's VLLM_-prefixed variables (register()
    makes them known) and still refuses a misspelt one."""
    from vllm import envs
    from vllm.platforms import current_platform
    serve()
    for name in [n for n in os.environ if n.startswith("VLLM_") and n not in envs.environment_variables]:
        monkeypatch.delenv(name)  # this machine's own, if any: not the plugin's to answer for
    monkeypatch.setenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "1")
    monkeypatch.setenv("VLLM_NVFP4_MLA_SCALES_FILE", "")
    current_platform.validate_environ(True)
    engine_config(tiny_model, D368, fail_on_environ_validation=True)
    monkeypatch.setenv("VLLM_NVFP4_MLA_SCALE_FILE", "/x/s.json")
    with pytest.raises(ValueError, match="Unknown vLLM environment variable detected: VLLM_NVFP4_MLA_SCALE_FILE"):
        current_platform.validate_environ(True)


def test_the_suite_should_run_a_version_the_extra_allows():
    assert VERSION in VERSIONS
    requires = [r for r in importlib.metadata.requires("nvfp4-mla") or [] if r.startswith("vllm")]
    assert requires and all("0.35" in r and "0.33" in r for r in requires), requires
