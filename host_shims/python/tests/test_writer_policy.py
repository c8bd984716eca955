"""Writer policies through the shim (issue 16): NVFP4_MLA_WRITER_POLICY by the plugin's choice rule
and in its words, the policy in the configuration (not in the identity), `require` refusing a plugin
that cannot serve it, and `Context.write(writer_policy=...)` on the CPU backend."""
import ctypes as C
import os

import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC

ENV = "NVFP4_MLA_WRITER_POLICY"


@pytest.mark.parametrize("value, want", [(None, "rtn"), ("", "rtn"), ("rtn", "rtn"), ("mse", "mse"), ("MSE", "mse"),
                                         ("Rtn", "rtn")])
def test_from_env_should_take_the_choice_rules_spellings(value, want):
    env = {} if value is None else {ENV: value}
    assert nvfp4_mla.CacheFormat.from_env(env).writer_policy == want


@pytest.mark.parametrize("value", [" mse", "mse\n", "4over6", "1", "rtn,mse", "m\u00e9se"])
def test_from_env_should_refuse_other_values_in_the_plugins_words(plugin, value):
    with pytest.raises(nvfp4_mla.ConfigError) as err:
        nvfp4_mla.CacheFormat.from_env({ENV: value})
    quoted = nvfp4_mla.settings.quote(value)
    words = f"{ENV}={quoted} is not one of: rtn, mse (any case); unset or empty is rtn"
    assert words in str(err.value)
    raw = (C.c_char_p * 2)(f"{ENV}={value}".encode(), None)
    req = nvfp4_mla._abi.ConfigRequest(struct_size=C.sizeof(nvfp4_mla._abi.ConfigRequest), cache_dtype=b"nvfp4_ds_mla",
                                       environ=C.cast(raw, C.POINTER(C.c_char_p)))
    handle = C.c_void_p()
    assert plugin.table.config_create(C.byref(req), C.byref(handle)) == nvfp4_mla._abi.ERR_CONFIG
    assert plugin.table.last_error().decode() == words


def test_configuration_should_carry_the_policy_but_not_in_the_identity(plugin):
    for base in (nvfp4_mla.CacheFormat(fp8_rope=True), nvfp4_mla.CacheFormat(fp8_rope=True, dynamic_scale=True)):
        mse = nvfp4_mla.CacheFormat(fp8_rope=base.fp8_rope, dynamic_scale=base.dynamic_scale, writer_policy="mse")
        a, b = base.open(plugin), mse.open(plugin)
        try:
            assert (a.writer_policy, b.writer_policy) == (nvfp4_mla._abi.WRITER_POLICY_RTN,
                                                          nvfp4_mla._abi.WRITER_POLICY_MSE)
            assert a.has_writer_policy and b.has_writer_policy
            assert a.identity == b.identity
        finally:
            a.close(), b.close()
        assert "serves" in nvfp4_mla.require(plugin, mse)


def test_require_should_refuse_a_plugin_that_cannot_serve_the_policy(mock_dir):
    fmt = nvfp4_mla.CacheFormat(fp8_rope=True, writer_policy="mse")
    old = nvfp4_mla.load(os.path.join(mock_dir, "libmock_old_minor.so"))
    with pytest.raises(nvfp4_mla.PluginError) as err:
        nvfp4_mla.require(old, fmt)
    assert '(ABI 1.0) has no writer policies, but NVFP4_MLA_WRITER_POLICY="mse" asks for one' in str(err.value)
    assert err.value.reason == "missing_capability"
    assert "serves" in nvfp4_mla.require(old, nvfp4_mla.CacheFormat(fp8_rope=True))  # rtn: every writer
    # A current plugin without the capability (the mock's configuration reads the process environment).
    current = nvfp4_mla.load(os.path.join(mock_dir, "libmock_current.so"))
    os.environ[ENV] = "mse"
    try:
        with pytest.raises(nvfp4_mla.PluginError) as err:
            nvfp4_mla.require(current, fmt)
    finally:
        del os.environ[ENV]
    assert "(requested by the configuration): missing write.policy_mse" in str(err.value)


def test_write_should_use_the_policy_it_is_given(plugin):
    rng = np.random.default_rng(5)
    x = nvfp4_mla.bf16_bits(rng.standard_normal((64, 576)).astype(np.float32) * np.exp(rng.standard_normal((64, 1))))
    caches, errors = {}, {}
    with nvfp4_mla.Context(plugin) as ctx:
        for policy in (None, "rtn", "mse", nvfp4_mla._abi.WRITER_POLICY_MSE):
            cache = np.zeros((1, 64, 368), np.uint8)
            ctx.write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
                      scale_mode=SCALE_PER_TOKEN, writer_policy=policy)
            out = np.zeros((64, 576), np.uint16)
            ctx.gather(cache, np.arange(64, dtype=np.int32), out, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
            a, b = nvfp4_mla.bf16_to_float32(x[:, :512]), nvfp4_mla.bf16_to_float32(out[:, :512])
            caches[policy], errors[policy] = cache.tobytes(), np.linalg.norm(a - b) / np.linalg.norm(a)
        assert caches[None] == caches["rtn"] and caches["mse"] == caches[nvfp4_mla._abi.WRITER_POLICY_MSE]
        assert caches["mse"] != caches["rtn"]
        assert errors["mse"] < 0.95 * errors["rtn"]
        cache = np.zeros((1, 64, 368), np.uint8)  # the prepared path binds the policy once
        ctx.prepare_write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
                          scale_mode=SCALE_PER_TOKEN, writer_policy="mse").run()
        assert cache.tobytes() == caches["mse"]
        cache = np.zeros((1, 64, 368), np.uint8)
        with pytest.raises(nvfp4_mla.InvalidArgument) as err:
            ctx.write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
                      scale_mode=SCALE_STATIC, writer_policy=7)
        assert "write: writer_policy is 7, must be 0 (rtn) or 1 (mse)" in str(err.value)
        with pytest.raises(ValueError, match="writer_policy '4over6': expected one of rtn, mse"):
            ctx.write(x[:, :512], x[:, 512:], np.arange(64, dtype=np.int64), cache, layout=LAYOUT_FP8_ROPE_368,
                      scale_mode=SCALE_STATIC, writer_policy="4over6")
