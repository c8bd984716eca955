"""Issue 48 in the shim: flags that are bools, integers that cannot wrap in a ctypes field, strings where
an environment holds strings, paths and dtypes by name, prepared calls that check each array's dtype and
layout per call, closed objects that say so, overlapping outputs and corrupt record fields."""
import pathlib

import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_BF16_ROPE_432, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC
from samples import tokens

KW = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)


def cache_of(n_blocks=1, record=368):
    return np.zeros((n_blocks, 64, record), np.uint8)


def written_cache(ctx, n=8, layout=LAYOUT_FP8_ROPE_368, mode=SCALE_PER_TOKEN):
    x = tokens(n, scale=0.5)
    cache = cache_of(record=nvfp4_mla._abi.record_bytes(layout))
    ctx.write(x[:, :512], x[:, 512:], np.arange(n, dtype=np.int64), cache, layout=layout, scale_mode=mode)
    return cache, x


# ---- Case 4: CacheFormat took any truthy value ("0" was on, "false" the 368 layout). ----

@pytest.mark.parametrize("kwargs, words", [
    (dict(dynamic_scale="0", fp8_rope=True), "CacheFormat: dynamic_scale='0': expected True or False"),
    (dict(fp8_rope="false"), "CacheFormat: fp8_rope='false': expected True or False"),
    (dict(fp8_rope=1), "CacheFormat: fp8_rope=1: expected True or False"),
    (dict(scales_file=7), "CacheFormat: scales_file=7: expected a path"),
    (dict(writer_policy="4over6"), "CacheFormat: writer_policy='4over6': expected one of rtn, mse (any case)"),
    (dict(writer_policy=1), "CacheFormat: writer_policy=1: expected one of rtn, mse"),
])
def test_cache_format_should_refuse_what_is_not_its_type(kwargs, words):
    with pytest.raises((TypeError, ValueError)) as err:
        nvfp4_mla.CacheFormat(**kwargs)
    assert words in str(err.value)


def test_writer_policy_names_should_follow_the_settings_rule_in_any_case(plugin):
    """Issue 58, N15: Context.write(writer_policy='MSE') and CacheFormat(writer_policy='MSE') were refused
    while NVFP4_MLA_WRITER_POLICY=MSE was taken ("any case"): one rule for the name everywhere."""
    assert nvfp4_mla.CacheFormat(writer_policy="MSE").writer_policy == "mse"
    assert nvfp4_mla.CacheFormat.from_env({"NVFP4_MLA_WRITER_POLICY": "MSE"}).writer_policy == "mse"
    ctx = nvfp4_mla.Context(plugin, "cpu")
    x = tokens(8, scale=0.5)
    by_name = {}
    for name in ("mse", "MSE", "Mse"):
        cache = cache_of()
        ctx.write(x[:, :512], x[:, 512:], np.arange(8, dtype=np.int64), cache, writer_policy=name, **KW)
        by_name[name] = cache.tobytes()
    assert by_name["MSE"] == by_name["mse"] == by_name["Mse"]
    with pytest.raises(ValueError, match=r"writer_policy 'MSE2': expected one of rtn, mse \(any case\)"):
        ctx.write(x[:, :512], x[:, 512:], np.arange(8, dtype=np.int64), cache_of(), writer_policy="MSE2", **KW)


def test_cache_format_should_take_a_path_object_as_its_scales_file(profile_path):
    fmt = nvfp4_mla.CacheFormat(fp8_rope=True, scales_file=pathlib.Path(profile_path))
    assert fmt.scales_file == profile_path and fmt.environ()["VLLM_NVFP4_MLA_SCALES_FILE"] == profile_path


# ---- Case 5: integers wrapped in ctypes fields (layout 2**32+1 wrote layout 1, True was mse). ----

@pytest.mark.parametrize("extra, error, words", [
    (dict(layout=2**32 + 1, scale_mode=SCALE_PER_TOKEN), ValueError,
     "layout=4294967297: out of range, must be in [0, 4294967295]"),
    (dict(layout=-1, scale_mode=SCALE_PER_TOKEN), ValueError, "layout=-1: out of range"),
    (dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=2**33), ValueError, "scale_mode=8589934592: out of range"),
    (dict(KW, writer_policy=2**32 + 1), ValueError, "writer_policy=4294967297: out of range"),
    (dict(KW, writer_policy=True), TypeError, "writer_policy=True: expected an integer"),
    (dict(KW, writer_policy=1.9), TypeError, "writer_policy=1.9: expected an integer"),
    (dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC, outer_scale=10**400), ValueError,
     "outer_scale=1" + "0" * 56 + "...: too large for a float"),
    (dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_STATIC, outer_scale=True), TypeError,
     "outer_scale=True: expected a number"),
])
def test_integers_and_numbers_should_never_wrap_into_a_field(ctx, extra, error, words):
    x = tokens(2)
    cache = cache_of()
    with pytest.raises(error) as err:
        ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), cache, **extra)
    assert words in str(err.value)
    assert not cache.any()


def test_numpy_scalars_should_be_taken_as_their_values(ctx):
    x = tokens(2)
    cache, want = cache_of(), cache_of()
    ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), cache, layout=np.int64(LAYOUT_FP8_ROPE_368),
              scale_mode=np.uint32(SCALE_STATIC), outer_scale=np.float32(0.5), writer_policy=np.int8(1))
    ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), want, layout=LAYOUT_FP8_ROPE_368,
              scale_mode=SCALE_STATIC, outer_scale=0.5, writer_policy="mse")
    assert cache.any() and bytes(cache) == bytes(want)


def test_device_and_layer_indices_should_never_wrap(plugin):
    with pytest.raises(ValueError, match="device 'cuda:4294967296': the index must be below 2\\^31"):
        nvfp4_mla.Context(plugin, "cuda:4294967296")
    cfg = nvfp4_mla.CacheFormat(fp8_rope=True).open(plugin)
    try:
        for layer, words in ((-1, "layer=-1: out of range"), (2**32, "layer=4294967296: out of range"),
                             (True, "layer=True: expected an integer"), (0.0, "layer=0.0: expected an integer")):
            with pytest.raises((TypeError, ValueError)) as err:
                cfg.layer_scale(layer)
            assert words in str(err.value)
        assert cfg.layer_scale(np.int64(3)) == 1.0
    finally:
        cfg.close()


# ---- Smaller cases: arguments whose errors named nothing. ----

def test_environment_snapshots_should_hold_strings(plugin):
    with pytest.raises(TypeError, match="environ\\['X'\\]: its value 1 is not a string"):
        nvfp4_mla.Context(plugin, environ={"X": 1})
    with pytest.raises(ValueError, match="environ\\['A=B'\\]: a name holds no '='"):
        nvfp4_mla.Context(plugin, environ={"A=B": "1"})
    with pytest.raises(TypeError, match="CacheFormat.from_env: KV_FP8_ROPE=1: expected a str"):
        nvfp4_mla.CacheFormat.from_env({"KV_FP8_ROPE": 1})


def test_paths_and_cache_dtypes_should_be_named(plugin, data_dir):
    fmt = nvfp4_mla.CacheFormat(fp8_rope=True)
    cfg = fmt.open(plugin, model_dir=pathlib.Path(data_dir) / "model_inline")
    try:
        assert cfg.num_layers == 2
    finally:
        cfg.close()
    with pytest.raises(TypeError, match="model_dir=5: expected a path"):
        fmt.open(plugin, model_dir=5)
    with pytest.raises(TypeError, match="cache_dtype=None: expected a cache dtype's name"):
        fmt.open(plugin, None)
    with pytest.raises(TypeError, match="plugin selection 3: expected a path"):
        nvfp4_mla.load(3)


def test_offload_namespace_should_refuse_sizes_that_are_not_sizes(plugin):
    fmt = nvfp4_mla.CacheFormat(fp8_rope=True, dynamic_scale=True)
    for kwargs, words in ((dict(block_size=0, num_layers=78), "block_size=0: out of range"),
                          (dict(block_size=64, num_layers=-5), "num_layers=-5: out of range"),
                          (dict(block_size=64, num_layers=78, block_stride_bytes=100), "block_stride_bytes=100: out of "
                                                                                       "range, must be in [23552,"),
                          (dict(block_size=64.0, num_layers=78), "block_size=64.0: expected an integer")):
        with pytest.raises((TypeError, ValueError)) as err:
            fmt.offload_namespace(plugin, "nvfp4_ds_mla", **kwargs)
        assert words in str(err.value)
    assert fmt.offload_namespace(plugin, "nvfp4_ds_mla", 64, 78)["worker_kv_bytes_per_block"] == 78 * 64 * 368


def test_model_dir_should_be_read_in_every_mode(plugin, data_dir):
    """Case 9: per-token scales (or an environment scales file) never read model_dir."""
    per_token = nvfp4_mla.CacheFormat(dynamic_scale=True, fp8_rope=True)
    with pytest.raises(nvfp4_mla.ConfigError, match="model_dir /nonexistent: No such file or directory"):
        per_token.open(plugin, model_dir="/nonexistent")
    seen = []
    per_token.open(plugin, model_dir=f"{data_dir}/model_inline", log=lambda level, msg: seen.append(msg)).close()
    assert any("carries calibration (\"nvfp4_mla_outer_scales\") that is not used: per-token mode" in m for m in seen)


def test_loader_should_name_a_selection_the_host_gave(plugin_path):
    with pytest.raises(nvfp4_mla.PluginNotSelected, match="the plugin selection is empty") as err:
        nvfp4_mla.load("")
    assert "NVFP4_MLA_PLUGIN" not in str(err.value)
    with pytest.raises(nvfp4_mla.PluginDisabled, match='the plugin selection is "none"'):
        nvfp4_mla.load("none")
    assert nvfp4_mla.load(pathlib.Path(plugin_path)).path == plugin_path


# ---- Case 7: a prepared call checked nothing per call (a uint8 out took 8 MiB into 4 MiB). ----

def test_prepared_calls_should_check_each_arrays_dtype_and_layout_per_call(ctx):
    cache, _ = written_cache(ctx)
    rng = np.random.default_rng(5)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((4, 16, 576)).astype(np.float32))
    top = rng.integers(0, 8, (4, 8)).astype(np.int32)
    out = np.zeros((4, 16, 512), np.uint16)
    a = ctx.prepare_attend(q, top, cache, out, sm_scale=0.04, **KW)
    wrong = np.zeros(out.shape, np.uint8)
    with pytest.raises(nvfp4_mla.ArrayError, match="out: \\(dtype, strides, other dimensions\\)"):
        a(q, top, wrong)  # the reproducer: 8 bytes written per 4 the array holds
    assert not wrong.any()
    for bad_q, bad_top in ((q[:, :8], top), (q.astype(np.float32), top), (q, top.astype(np.int64)),
                           (np.ascontiguousarray(q[:, :, :288]), top)):
        with pytest.raises(nvfp4_mla.ArrayError):
            a(bad_q, bad_top, out)
    a(q[:2], top[:2], out[:2])  # fewer rows of the bound layout: served
    g = ctx.prepare_gather(cache, np.arange(4, dtype=np.int32), np.zeros((4, 576), np.uint16), **KW)
    with pytest.raises(nvfp4_mla.ArrayError, match="slots"):
        g(np.arange(4, dtype=np.int64), np.zeros((4, 576), np.uint16))
    for n in (True, 1.5, "2"):
        with pytest.raises(TypeError, match=f"n={n!r}: expected an integer"):
            g.run(n)
    with pytest.raises(ValueError, match="n = 9, the bound arrays hold 0..4 rows"):
        g.run(9)


def test_closed_objects_should_say_so(plugin):
    ctx = nvfp4_mla.Context(plugin)
    cache = cache_of()
    g = ctx.prepare_gather(cache, np.arange(2, dtype=np.int32), np.zeros((2, 576), np.uint16), **KW)
    ctx.close()
    ctx.close()  # a second close does nothing
    x = tokens(2)
    with pytest.raises(ValueError, match="write: this nvfp4_mla.Context is closed"):
        ctx.write(x[:, :512], x[:, 512:], np.arange(2, dtype=np.int64), cache, **KW)
    with pytest.raises(ValueError, match="prepare_gather: this nvfp4_mla.Context is closed"):
        ctx.prepare_gather(cache, np.arange(2, dtype=np.int32), np.zeros((2, 576), np.uint16), **KW)
    with pytest.raises(ValueError, match="gather: the context of this prepared call is closed"):
        g.run()
    cfg = nvfp4_mla.CacheFormat().open(plugin)
    cfg.close()
    cfg.close()
    with pytest.raises(ValueError, match="layer_scale: this PluginConfig is closed"):
        cfg.layer_scale(0)


# ---- Case 8: overlapping outputs, refused by the plugin by name. ----

def test_outputs_overlapping_other_arguments_should_be_refused(ctx):
    cache, x = written_cache(ctx)
    rng = np.random.default_rng(6)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((2, 4, 576)).astype(np.float32))
    top = rng.integers(0, 8, (2, 8)).astype(np.int32)
    buffer = np.zeros(2 * 4 * 512 + 64, np.uint16)
    out = buffer[:2 * 4 * 512].reshape(2, 4, 512)
    lse = buffer[1024:1024 + 16].view(np.float32).reshape(2, 4)  # lse as a view into out
    with pytest.raises(nvfp4_mla.InvalidArgument, match="attend: lse overlaps out"):
        ctx.attend(q, top, cache, out, lse=lse, sm_scale=0.04, **KW)
    assert not buffer.any()
    rows = cache.reshape(-1)[:8 * 576 * 2].view(np.uint16).reshape(8, 576)  # gather's out over the cache
    with pytest.raises(nvfp4_mla.InvalidArgument, match="gather: out overlaps cache"):
        ctx.gather(cache, np.arange(8, dtype=np.int32), rows, **KW)
    with pytest.raises(nvfp4_mla.InvalidArgument, match="write: cache overlaps kv_c"):
        flat = cache.reshape(-1)
        kv = flat[:2 * 576 * 2].view(np.uint16).reshape(2, 576)
        ctx.write(kv[:, :512], kv[:, 512:], np.arange(2, dtype=np.int64), cache, **KW)


# ---- Case 2: a corrupt float field of one record made attention NaN. ----

@pytest.mark.parametrize("layout, mode, offset, bits, width", [
    (LAYOUT_FP8_ROPE_368, SCALE_STATIC, 288, 0x7FC00000, 4),   # r NaN
    (LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 292, 0x7F800000, 4),  # s_t +Inf
    (LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, 292, 0xBF800000, 4),  # s_t -1
    (LAYOUT_BF16_ROPE_432, SCALE_STATIC, 320, 0x7FC0, 2),     # a RoPE value NaN
])
def test_corrupt_record_fields_should_read_as_zero(ctx, layout, mode, offset, bits, width):
    cache, _ = written_cache(ctx, layout=layout, mode=mode)
    record = cache[0, 3]
    record[offset:offset + width] = np.frombuffer(int(bits).to_bytes(width, "little"), np.uint8)
    rows = np.zeros((8, 576), np.uint16)
    ctx.gather(cache, np.arange(8, dtype=np.int32), rows, layout=layout, scale_mode=mode)
    assert not ((rows & 0x7F80) == 0x7F80).any()
    part = slice(0, 512) if offset == 292 else slice(512 + (offset - 304) // 2, 513 + (offset - 304) // 2) \
        if width == 2 else slice(512, 576)
    assert not (rows[3, part] & 0x7FFF).any()
    rng = np.random.default_rng(7)
    q = nvfp4_mla.bf16_bits(rng.standard_normal((2, 4, 576)).astype(np.float32))
    out, lse = np.zeros((2, 4, 512), np.uint16), np.zeros((2, 4), np.float32)
    ctx.attend(q, np.tile(np.arange(8, dtype=np.int32), (2, 1)), cache, out, lse=lse, layout=layout, scale_mode=mode,
               sm_scale=0.04)
    assert not ((out & 0x7F80) == 0x7F80).any() and np.isfinite(lse).all()
