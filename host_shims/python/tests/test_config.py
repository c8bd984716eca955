"""CacheFormat: an immutable snapshot; every decision and identity string asked of the plugin."""
import ctypes as C
import dataclasses
import os

import pytest

import nvfp4_mla

REAL_SHA = "52462f01e0559e987e171702ad26e40e0bfb39d7d944d07af96c001f5e62b9c9"


def test_from_env_should_snapshot_once_and_stay_immutable(monkeypatch):
    monkeypatch.setenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "1")
    monkeypatch.setenv("KV_FP8_ROPE", "TRUE")
    monkeypatch.setenv("VLLM_NVFP4_MLA_SCALES_FILE", "")
    fmt = nvfp4_mla.CacheFormat.from_env()
    monkeypatch.setenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "0")
    assert fmt == nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True, scales_file="")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fmt.dynamic_scale = False


@pytest.mark.parametrize("env, want", [
    ({}, nvfp4_mla.CacheFormat()),
    ({"VLLM_NVFP4_MLA_DYNAMIC_SCALE": "", "KV_FP8_ROPE": "0"}, nvfp4_mla.CacheFormat()),
    ({"VLLM_NVFP4_MLA_DYNAMIC_SCALE": "true", "KV_FP8_ROPE": "True"},
     nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True)),
    ({"KV_FP8_ROPE": "FALSE", "VLLM_NVFP4_MLA_SCALES_FILE": "/a b.json"},
     nvfp4_mla.CacheFormat(scales_file="/a b.json")),
    # Issue 37: stripped, as the runtime this variable comes from reads it; empty after stripping is none.
    ({"VLLM_NVFP4_MLA_SCALES_FILE": "  "}, nvfp4_mla.CacheFormat()),
    ({"VLLM_NVFP4_MLA_SCALES_FILE": " \t/x.json\n"}, nvfp4_mla.CacheFormat(scales_file="/x.json")),
])
def test_from_env_should_accept_the_rules_spellings(env, want):
    assert nvfp4_mla.CacheFormat.from_env(env) == want


ACCEPTED = "is not a boolean: use 1 or true for on, 0 or false for off (any case); unset or empty is off"


@pytest.mark.parametrize("env, words", [
    ({"VLLM_NVFP4_MLA_DYNAMIC_SCALE": "yes", "KV_FP8_ROPE": "1"}, 'VLLM_NVFP4_MLA_DYNAMIC_SCALE="yes" ' + ACCEPTED),
    ({"VLLM_NVFP4_MLA_DYNAMIC_SCALE": "2"}, 'VLLM_NVFP4_MLA_DYNAMIC_SCALE="2" ' + ACCEPTED),
    ({"VLLM_NVFP4_MLA_DYNAMIC_SCALE": "1 ", "VLLM_NVFP4_MLA_SCALES_FILE": "/x.json"},
     'VLLM_NVFP4_MLA_DYNAMIC_SCALE="1 " ' + ACCEPTED),
    ({"KV_FP8_ROPE": "\ttrue"}, 'KV_FP8_ROPE="\\ttrue" ' + ACCEPTED),
    ({"KV_FP8_ROPE": "y\x01\u00e9\"\\"}, 'KV_FP8_ROPE="y\\x01\\xc3\\xa9\\"\\\\" ' + ACCEPTED),
])
def test_from_env_should_refuse_what_the_plugin_refuses_in_its_words(plugin, env, words):
    with pytest.raises(nvfp4_mla.ConfigError) as err:
        nvfp4_mla.CacheFormat.from_env(env)
    assert err.value.status == nvfp4_mla._abi.ERR_CONFIG
    assert words in str(err.value)
    # The plugin, handed the same snapshot, says the same thing.
    raw = [f"{k}={v}".encode() for k, v in env.items()]
    req_env = (C.c_char_p * (len(raw) + 1))(*raw, None)
    req = nvfp4_mla._abi.ConfigRequest(struct_size=C.sizeof(nvfp4_mla._abi.ConfigRequest), cache_dtype=b"nvfp4_ds_mla",
                                       environ=C.cast(req_env, C.POINTER(C.c_char_p)))
    handle = C.c_void_p()
    assert plugin.table.config_create(C.byref(req), C.byref(handle)) == nvfp4_mla._abi.ERR_CONFIG
    assert words in plugin.table.last_error().decode()


def test_scales_file_should_be_read_stripped_by_the_shim_and_the_plugin_alike(plugin, profile_path):
    real = profile_path
    fmt = nvfp4_mla.CacheFormat.from_env({"VLLM_NVFP4_MLA_SCALES_FILE": f" {real}\n", "KV_FP8_ROPE": "1"})
    assert fmt.scales_file == real
    want = f"nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:{REAL_SHA}"
    assert fmt.record_abi(plugin, "nvfp4_ds_mla") == want
    # The plugin, handed the unstripped value in a snapshot, strips it the same way.
    raw = [f"VLLM_NVFP4_MLA_SCALES_FILE= {real}\n".encode(), b"KV_FP8_ROPE=1"]
    req_env = (C.c_char_p * 3)(*raw, None)
    req = nvfp4_mla._abi.ConfigRequest(struct_size=C.sizeof(nvfp4_mla._abi.ConfigRequest), cache_dtype=b"nvfp4_ds_mla",
                                       environ=C.cast(req_env, C.POINTER(C.c_char_p)))
    handle = C.c_void_p()
    assert plugin.table.config_create(C.byref(req), C.byref(handle)) == nvfp4_mla._abi.OK
    cfg = nvfp4_mla.config.PluginConfig(plugin, handle)
    assert cfg.identity == want and cfg.scale_source_path == real
    cfg.close()


def test_identity_strings_should_come_from_the_plugin(plugin, profile_path):
    static = nvfp4_mla.CacheFormat(fp8_rope=True, scales_file=profile_path)
    assert static.record_abi(plugin, "nvfp4_ds_mla") == f"nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:{REAL_SHA}"
    assert static.record_abi(plugin, "fp8") == "vllm-default-v1"
    dynamic = nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True)
    assert dynamic.record_abi(plugin, "torch.nvfp4_ds_mla") == "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"
    assert nvfp4_mla.CacheFormat().record_abi(plugin, "nvfp4_ds_mla") == "vllm-default-v1"


def test_offload_namespace_should_add_fields_only_for_non_default_identities(plugin):
    dynamic = nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True)
    assert dynamic.offload_namespace(plugin, "nvfp4_ds_mla", block_size=64, num_layers=78) == {
        "kv_cache_abi": "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1", "worker_kv_bytes_per_block": 78 * 64 * 368}
    assert nvfp4_mla.CacheFormat().offload_namespace(plugin, "nvfp4_ds_mla", 64, 78) == {}


def test_validate_should_fail_closed_with_the_plugins_words(plugin, profile_path):
    both = nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True, scales_file=profile_path)
    with pytest.raises(nvfp4_mla.ConfigError, match="are mutually exclusive"):
        both.validate(plugin)
    with pytest.raises(nvfp4_mla.ConfigError, match="VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 requires KV_FP8_ROPE=1"):
        nvfp4_mla.CacheFormat(dynamic_scale=True).validate(plugin)
    with pytest.raises(nvfp4_mla.ConfigError, match="cannot open /nonexistent.json"):
        nvfp4_mla.CacheFormat(scales_file="/nonexistent.json").validate(plugin)


def test_checkpoint_scales_should_be_reported_through_the_log(plugin, data_dir):
    seen = []
    cfg = nvfp4_mla.CacheFormat(fp8_rope=True).open(plugin, model_dir=os.path.join(data_dir, "model_sidecar"),
                                                    log=lambda level, msg: seen.append(msg))
    assert cfg.num_layers == 2 and cfg.layer_scale(1) == pytest.approx(4.0 / 2688) and cfg.layer_scale(99) == 1.0
    cfg.close()
    assert any("checkpoint sidecar file" in m for m in seen)


# What the interpreter does to a module at exit before the last objects go: every name of its dict set to
# None (CPython's module finalisation). A PluginConfig still alive then (a module global, a cycle)
# is closed by __del__ after that.
EXIT = """
import os, sys
import nvfp4_mla
cfg = nvfp4_mla.CacheFormat().open(nvfp4_mla.load(os.environ["NVFP4_MLA_PLUGIN_PATH"]))
for name, module in list(sys.modules.items()):
    if name == "nvfp4_mla" or name.startswith("nvfp4_mla."):
        for key in list(vars(module)):
            if key != "__builtins__":
                vars(module)[key] = None
cfg.close()
cfg.close()
print("closed", cfg._handle)
"""


def test_config_should_close_without_a_traceback_after_module_teardown(plugin_path):
    """bad-inputs-4 N17: at exit, PluginConfig.__del__ printed "Exception ignored in PluginConfig.close ...
    errors.py, in member: TypeError: 'NoneType' object is not callable" (seen with PyTorch imported)."""
    import subprocess
    import sys
    env = dict(os.environ, NVFP4_MLA_PLUGIN_PATH=plugin_path)
    done = subprocess.run([sys.executable, "-c", EXIT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "closed None\n"
