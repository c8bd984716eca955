"""The real DeepSeek-V3.2 model code of the vLLM under test (0.33.0 or 0.34.0) with this backend (a tiny
config.json, dummy weights, built on the CPU) served the shortest way: `--kv-cache-dtype
nvfp4_mla368_ds_mla` alone, no other flag or variable. Its layers, their cache specs and vLLM's
KV-cache plan beside the indexer's
132-byte rows, the metadata builder and its build() of a decode and a mixed batch, the Impl writing
and attending through the plugin's CPU backend with each layer's calibrated scale, the
fused_norm_rope wrapper, and the offload namespace. (The Triton kernels around them, vLLM's top-k
conversion and the fused norm+rope itself, need a GPU: tools/vllm-serve-check runs them.)"""
import inspect
import json
import os
import shutil
import tempfile

import pytest
import torch

from contract import VERSION, Captured, build_model, engine_config, environ, stand_in
from nvfp4_mla.vllm_plugin import kernels, serving

D368 = serving.DTYPE_368
SCALES = [0.01, 0.02]  # the tiny model's two layers, calibrated


def calibration_file(folder, scales=SCALES):
    path = os.path.join(folder, "scales.json")
    with open(path, "w") as f:
        json.dump({"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": len(scales), "latent_dim": 512,
                   "denominator": 2688.0, "scales": scales}, f)
    return path


class Served:
    """A model built under one deployment's environment (a stand-in decision for the module), with
    vLLM's log lines of the build."""

    def __init__(self, plugin_path, model_dir, dtype=D368, **settings):
        self.decision = stand_in(serving.decide(environ(plugin_path, **settings)))
        self.previous = serving.install(self.decision)
        with Captured() as log:
            self.config = engine_config(model_dir, dtype)
            self.model = build_model(self.config)
        self.log = log
        from vllm.model_executor.layers.attention import MLAAttention
        context = self.config.compilation_config.static_forward_context
        self.layers = {n: lay for n, lay in context.items() if isinstance(lay, MLAAttention)}
        self.all_layers = context
        self.plan = next(iter(self.layers.values())).impl._plan

    def use(self):
        """Make this deployment's decision the process's (fixtures of two deployments coexist)."""
        serving.install(self.decision)

    def close(self):
        serving.install(self.previous)


@pytest.fixture(scope="module")
def per_token(plugin_path, registered, tiny_model):
    served = Served(plugin_path, tiny_model)  # nothing set: no calibration, so per-token scales
    yield served
    served.close()


@pytest.fixture(scope="module")
def calibrated(plugin_path, registered, tiny_model):
    folder = tempfile.mkdtemp(prefix="nvfp4-scales-")
    served = Served(plugin_path, tiny_model, VLLM_NVFP4_MLA_SCALES_FILE=calibration_file(folder))
    yield served
    served.close()
    shutil.rmtree(folder)


def specs_of(served):
    from vllm.config import set_current_vllm_config
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec
    with set_current_vllm_config(served.config):
        return get_kv_cache_spec(served.config)


def test_model_should_build_its_attention_layers_with_this_backend(per_token):
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseBackend, NvFp4MlaSparseImpl
    assert sorted(per_token.layers) == ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
    for layer in per_token.layers.values():
        assert layer.attn_backend is NvFp4MlaSparseBackend
        assert isinstance(layer.impl, NvFp4MlaSparseImpl)
        assert layer.kv_cache_dtype == D368 and layer.prefill_backend is None  # no dense-MHA prefill
        assert layer.impl.scale == pytest.approx((32 + 64) ** -0.5)


def test_cache_specs_should_be_368_byte_records_beside_132_byte_indexer_rows(per_token):
    from vllm.v1.kv_cache_interface import KVQuantMode, SparseCacheRole
    specs = specs_of(per_token)
    mla = {n: s for n, s in specs.items() if n in per_token.layers}
    indexer = {n: s for n, s in specs.items() if getattr(s, "cache_role", None) == SparseCacheRole.INDEXER}
    assert len(mla) == 2 and len(indexer) == 2
    for spec in mla.values():
        assert (spec.state_content_bytes, spec.page_size_bytes, spec.block_size) == (368, 368 * 64, 64)
        assert spec.page_size_bytes == 23552 and spec.dtype == torch.uint8
        assert spec.kv_quant_mode is KVQuantMode.NVFP4_DS_MLA and spec.get_block_stride_alignment() == 368
    for spec in indexer.values():
        assert spec.page_size_bytes == serving.INDEXER_ROW_BYTES * 64
    # vLLM's own customize_attention_spec, as its workers call it, for the 432-byte name as well.
    from dataclasses import replace
    from vllm.v1.worker.utils import customize_attention_spec
    layer = next(iter(per_token.layers.values()))
    raw = layer.get_kv_cache_spec(per_token.config)
    assert raw.state_content_bytes is None and raw.page_size_bytes == 576 * 64  # what vLLM sizes without the hook
    for dtype, record in ((D368, 368), (serving.DTYPE_432, 432)):
        spec = customize_attention_spec(layer.attn_backend, replace(raw, cache_dtype_str=dtype))
        assert (spec.page_size_bytes, spec.block_stride_alignment) == (record * 64, record)


def _plan(served, specs, memory):
    """What the engine core does with the workers' specs: resolve the layout, group, plan."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    backends = {layer.get_attn_backend() for layer in served.all_layers.values()}
    layouts = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
    with set_current_vllm_config(served.config):
        resolve_kv_cache_layout(served.config, [layouts], specs.values())
        groups = get_global_kv_cache_groups(served.config, [specs])
        return get_kv_cache_configs(served.config, [specs], [memory], groups)[0]


def test_kv_cache_plan_should_hold_1_58x_the_tokens_of_656_byte_records(per_token):
    """vLLM's own planner over the model's specs, and over the same specs with FLASHMLA_SPARSE's
    656-byte MLA pages (as its customize_spec aligns them): the indexer's rows are the same in both."""
    from dataclasses import replace
    from vllm.v1.attention.backends.mla.flashmla_sparse import FlashMLASparseBackend
    specs = specs_of(per_token)
    memory = 256 << 20
    plan = _plan(per_token, specs, memory)
    per_block = sum(s.page_size_bytes for s in specs.values())
    assert per_block == 2 * (368 + 132) * 64
    assert plan.num_blocks == memory // per_block
    fp8 = {n: FlashMLASparseBackend.customize_spec(replace(s, state_content_bytes=656, cache_dtype_str="fp8_ds_mla",
                                                           block_stride_alignment=None))
           if n in per_token.layers else s for n, s in specs.items()}
    baseline = _plan(per_token, fp8, memory)
    assert plan.num_blocks / baseline.num_blocks == pytest.approx(serving.capacity_gain(D368), rel=2e-3)


def _builder(served):
    from vllm.config import set_current_vllm_config
    served.use()
    specs = specs_of(served)
    names = sorted(served.layers)
    backend = served.layers[names[0]].attn_backend
    with set_current_vllm_config(served.config):
        return backend.get_builder_cls()(specs[names[0]], names, served.config, torch.device("cpu"))


def _common(query_lens, seq_lens, block_table):
    """vLLM's per-batch metadata for requests of these query and sequence lengths (the token-to-request
    map given: computing it is a Triton kernel)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata
    qsl = torch.tensor([0] + list(torch.tensor(query_lens).cumsum(0)), dtype=torch.int32)
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    table = torch.tensor(block_table, dtype=torch.int32)
    token_req = torch.repeat_interleave(torch.arange(len(query_lens), dtype=torch.int32), torch.tensor(query_lens))
    slots = torch.cat([table[r, (p // 64)] * 64 + p % 64 for r, (q, s) in enumerate(zip(query_lens, seq_lens))
                       for p in [torch.arange(s - q, s)]]).long()
    return CommonAttentionMetadata(query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq,
                                   num_reqs=len(seq),
                                   num_actual_tokens=int(qsl[-1]), max_query_len=max(query_lens),
                                   max_seq_len=max(seq_lens), block_table_tensor=table, slot_mapping=slots,
                                   seq_lens_cpu_upper_bound=seq.clone(), _token_to_req_indices_cache=token_req)


def test_metadata_builder_should_build_a_decode_and_a_mixed_batch(per_token):
    from vllm.v1.attention.backend import AttentionCGSupport
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseMetadata
    builder = _builder(per_token)
    assert type(builder).get_cudagraph_support(per_token.config, None) is AttentionCGSupport.UNIFORM_BATCH
    decode = builder.build(0, _common([1, 1], [5, 70], [[0, 1], [2, 3]]))
    assert isinstance(decode, NvFp4MlaSparseMetadata)
    assert (decode.num_decodes, decode.num_prefills, decode.num_decode_tokens) == (2, 0, 2)
    assert (decode.block_size, decode.topk_tokens, decode.num_actual_tokens) == (64, 64, 2)
    # the contract suite has no GPU: the plan is the CPU backend's, whose attend needs no scratch
    assert decode.prefill is None and decode.attend_workspace_bytes == 0
    assert decode.req_id_per_token.tolist() == [0, 1]
    mixed = builder.build(0, _common([1, 1, 9], [5, 70, 9], [[0, 1], [2, 3], [4, 5]]))
    # Every row goes to the one attend: the prefill request is counted, no dense-MHA prefill is planned.
    assert (mixed.num_decodes, mixed.num_prefills, mixed.num_decode_tokens) == (2, 1, 2)
    assert mixed.prefill is None and mixed.num_actual_tokens == 11


def _tokens(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 576, generator=g).to(torch.bfloat16)


def _direct_write(plan, x, slots, blocks, outer_scale):
    ops = kernels.bound_ops(plan.plugin, "cpu", plan.layout, plan.scale_mode, plan.writer_policy)
    cache = torch.zeros(blocks, 64, 368, dtype=torch.uint8)
    ops.write(x[:, :512], x[:, 512:], slots, cache, outer_scale=outer_scale)
    return cache


@pytest.mark.parametrize("fixture", ["per_token", "calibrated"])
def test_impl_should_write_with_each_layers_scale_and_attend_through_the_plugin(request, fixture):
    from vllm.config import set_current_vllm_config
    served = request.getfixturevalue(fixture)
    x = _tokens(100, 1)
    slots = torch.cat([torch.arange(90), torch.full((10,), -1)])  # 10 padding tokens, skipped
    for index, name in enumerate(sorted(served.layers)):
        layer = served.layers[name]
        cache = torch.zeros(3, 64, 368, dtype=torch.uint8)
        layer.kv_cache = cache
        with set_current_vllm_config(served.config):  # the Impl finds its layer (and scale) by its index
            layer.impl.do_kv_cache_update(x[:, :512], x[:, 512:].unsqueeze(1), cache.view(torch.float8_e4m3fn),
                                          slots, D368, layer._k_scale)
        scale = None if fixture == "per_token" else SCALES[index]
        assert torch.equal(cache, _direct_write(served.plan, x, slots, 3, scale)), name
        if fixture == "calibrated":
            other = _direct_write(served.plan, x, slots, 3, SCALES[1 - index])
            assert not torch.equal(cache, other), "each layer must write with its own scale"
        q = torch.randn(4, 16, 576, generator=torch.Generator().manual_seed(100 + index)).to(torch.bfloat16)
        topk = torch.randint(0, 90, (4, 64), generator=torch.Generator().manual_seed(9), dtype=torch.int32)
        topk[:, 40:] = -1
        valid = torch.tensor([40, 40, 17, 0], dtype=torch.int32)  # the last row has no valid entry
        out, lse = layer.impl._forward_mqa_kernel((q[..., :512], q[..., 512:]), cache, topk, valid, layer=layer,
                                                  block_size=64, is_decode=True)
        ops = layer.impl._ops(cache.device)
        ref_out, ref_lse = kernels.reference_mqa(ops, q, cache, topk, valid, sm_scale=layer.impl.scale,
                                                 outer_scale=scale)
        assert out.shape == (4, 16, 512) and out.dtype == torch.bfloat16 and lse.shape == (4, 16)
        err = (out[:3].float() - ref_out[:3]).abs().max() / ref_out[:3].abs().max()
        assert err < 2e-2, f"{name}: {err}"
        assert torch.allclose(lse[:3], ref_lse[:3], rtol=2e-3, atol=2e-2)
        assert torch.all(out[3] == 0) and torch.all(torch.isneginf(lse[3]))


def test_fused_norm_rope_should_be_wrapped_for_0_33_and_0_34_and_refuse_another_signature(per_token):
    import vllm.models.deepseek_v32.attention as attention
    from vllm.models.deepseek_v32.common import kernels as fused
    from nvfp4_mla.vllm_plugin import hooks

    assert attention.fused_norm_rope.nvfp4_mla_original is fused.fused_norm_rope
    assert hooks.wrap_fused_norm_rope() is attention.fused_norm_rope  # idempotent
    hooks.check_fused_norm_rope(fused.fused_norm_rope)

    def changed(*args, **kwargs):
        return None
    params = list(inspect.signature(fused.fused_norm_rope).parameters.values())
    changed.__signature__ = inspect.Signature(params[:19] + [params[19].replace(name="mla_cache")] + params[20:])
    with pytest.raises(RuntimeError, match=rf"vLLM {VERSION}'s .*parameter 19 is 'mla_cache'.* vllm 0\.33 and 0\.34"):
        hooks.check_fused_norm_rope(changed)
    changed.__signature__ = inspect.Signature(params + [inspect.Parameter("fp4", params[-1].kind, default=None)])
    with pytest.raises(RuntimeError, match="it has 30 parameters where 0.33/0.34 have 29"):
        hooks.check_fused_norm_rope(changed)


def test_fused_norm_rope_wrapper_should_divert_the_cache_write_to_the_plugin_writer(per_token):
    """The fused kernel is Triton (a GPU): a stand-in with its contract (normed latent and roped k_pe
    into kv_c_out and k_pe_out; writes the cache only when given one) shows what the wrapper routes."""
    from vllm.config import set_current_vllm_config
    from nvfp4_mla.vllm_plugin import hooks
    x, calls = _tokens(8, 3), []

    def fused(positions, q_c, *args, mla_kv_cache=None, mla_kv_cache_dtype="auto", kv_c_out=None, k_pe_out=None,
              **kwargs):
        calls.append((mla_kv_cache, mla_kv_cache_dtype, kwargs["slot_mapping"]))
        kv_c_out.copy_(x[:, :512])
        k_pe_out.copy_(x[:, 512:])
        if mla_kv_cache is not None:
            mla_kv_cache.fill_(7)  # what vLLM's own write would do to these records
        return q_c

    wrapper = hooks.make_fused_norm_rope(fused)
    layer = per_token.layers["model.layers.1.self_attn.attn"]
    cache = torch.zeros(2, 64, 368, dtype=torch.uint8)
    layer.kv_cache = cache
    slots = torch.tensor([3, 4, 5, 64, 65, -1, -1, -1])
    args = [torch.arange(8), torch.zeros(8, 64)] + [None] * 13
    kv_c, k_pe = torch.zeros(8, 512, dtype=torch.bfloat16), torch.zeros(8, 64, dtype=torch.bfloat16)
    with set_current_vllm_config(per_token.config):
        wrapper(*args[:4], kv_c, None, 1e-6, k_pe, *args[8:], slot_mapping=slots, mla_kv_cache=cache,
                mla_kv_cache_dtype=D368, kv_c_out=torch.empty_like(kv_c), k_pe_out=torch.empty_like(k_pe))
    assert calls[-1][0] is None and calls[-1][1] == "auto" and calls[-1][2] is slots
    assert torch.equal(cache, _direct_write(per_token.plan, x, slots, 2, None))
    other = torch.zeros(2, 64, 656, dtype=torch.uint8)  # another dtype: untouched, the fused kernel writes
    wrapper(*args[:4], kv_c, None, 1e-6, k_pe, *args[8:], slot_mapping=slots, mla_kv_cache=other,
            mla_kv_cache_dtype="fp8_ds_mla", kv_c_out=torch.empty_like(kv_c), k_pe_out=torch.empty_like(k_pe))
    assert calls[-1][0] is other and calls[-1][1] == "fp8_ds_mla" and torch.all(other == 7)


def test_offload_namespace_should_carry_the_plugins_cache_identity(per_token, calibrated, tiny_model):
    from vllm.v1.kv_offload.file_mapper import FileMapper
    from nvfp4_mla.vllm_plugin import hooks

    def mapper(dtype):
        return FileMapper(root_dir="/offload", model_name=tiny_model, tokens_per_hash=64, blocks_per_file=1,
                          tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, rank=0, dtype=dtype)

    original = FileMapper._compute_base_path.nvfp4_mla_original
    plain = mapper("fp8_ds_mla")
    assert hooks.IDENTITY_FIELD not in plain.fields
    assert plain.base_path == original("/offload", dict(plain.fields))  # other dtypes keep their folder
    paths = {}
    for served in (per_token, calibrated):
        serving.install(served.decision)
        m = mapper(D368)
        assert m.fields[hooks.IDENTITY_FIELD] == served.plan.identity
        assert m.get_run_config()[hooks.IDENTITY_FIELD] == m.fields[hooks.IDENTITY_FIELD]
        paths[m.fields[hooks.IDENTITY_FIELD]] = m.base_path
    assert "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1" in paths
    assert any(i.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:") for i in paths)
    assert len(set(paths.values())) == 2, "records of different scales must not share a persistent folder"


def _refused(plugin_path, tiny_model, dtype=D368, **settings):
    """The message a model build under these settings fails with (vLLM's backend selection)."""
    model = tiny_model
    previous = serving.install(stand_in(serving.decide(environ(plugin_path, **settings))))
    try:
        with pytest.raises(ValueError, match=r"Selected backend .*NVFP4_MLA_SPARSE.* is not valid") as raised:
            build_model(engine_config(model, dtype))
        return str(raised.value)
    finally:
        serving.install(previous)


def test_the_shortest_serve_line_should_build_every_layer_on_the_backend_with_its_pages_and_scales(per_token):
    """N5 and N1: `--kv-cache-dtype nvfp4_mla368_ds_mla` alone: the backend chosen by the dtype on every
    attention layer, 64-token pages of 368-byte records, the fused norm+RoPE wrapped, per-token scales
    (no calibration anywhere) said at INFO in vLLM's log, and no unknown-variable warning."""
    import logging
    import vllm.models.deepseek_v32.attention as attention
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseBackend
    assert per_token.config.attention_config.backend is None  # not named: chosen by the dtype
    assert per_token.config.cache_config.block_size == 64
    assert len(per_token.layers) == 2
    for layer in per_token.layers.values():
        assert layer.attn_backend is NvFp4MlaSparseBackend
        assert layer.impl._outer_scale(layer) is None  # per token
    assert getattr(attention.fused_norm_rope, "nvfp4_mla_original", None) is not None
    specs = specs_of(per_token)
    assert {specs[n].page_size_bytes for n in per_token.layers} == {368 * 64}
    assert per_token.plan.identity == "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"
    infos = per_token.log.lines(logging.INFO)
    assert any("no calibration" in m and "per-token outer scales" in m for m in infos), infos
    assert not any("Unknown vLLM environment variable" in m for m in per_token.log.lines()), per_token.log.lines()


def test_calibrated_layers_should_take_their_scales_and_log_the_identity(calibrated):
    assert [lay.impl._outer_scale(lay) for _, lay in sorted(calibrated.layers.items())] == \
        [pytest.approx(s) for s in SCALES]
    assert calibrated.plan.identity.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:")
    assert any(f"cache identity {calibrated.plan.identity}" in m for m in calibrated.log.lines())


def test_no_calibration_on_432_should_be_refused_unless_uncalibrated_is_asked_for(plugin_path, registered,
                                                                                  tiny_model):
    """N1: the record without a per-token mode: refused with the fix; the opt-in builds, WARNING."""
    import logging
    words = _refused(plugin_path, tiny_model, serving.DTYPE_432)
    assert "no outer scales" in words and "NVFP4_MLA_UNCALIBRATED=1" in words and f"serve --kv-cache-dtype {D368}" \
        in words
    served = Served(plugin_path, tiny_model, serving.DTYPE_432, NVFP4_MLA_UNCALIBRATED="1")
    try:
        assert [lay.impl._outer_scale(lay) for lay in served.layers.values()] == [1.0, 1.0]
        assert any("every layer's outer scale is 1.0 (NVFP4_MLA_UNCALIBRATED=1)" in m
                   for m in served.log.lines(logging.WARNING)), served.log.lines()
    finally:
        served.close()


def test_a_calibration_that_does_not_cover_the_model_should_not_build(plugin_path, registered, tiny_model):
    """N3: a file of fewer layers than the model, and another model's file, refused naming them."""
    folder = tempfile.mkdtemp(prefix="nvfp4-scales-")
    one = calibration_file(folder, [0.01])
    words = _refused(plugin_path, tiny_model, VLLM_NVFP4_MLA_SCALES_FILE=one)
    assert f"VLLM_NVFP4_MLA_SCALES_FILE={one} calibrates 1 layers, but {tiny_model} has 2 attention layers" in words
    glm = os.path.join(os.path.dirname(__file__), "..", "..", "..", "data",
                       "glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json")
    words = _refused(plugin_path, tiny_model, VLLM_NVFP4_MLA_SCALES_FILE=glm)
    assert "calibrates 78 layers" in words and "a file for another model" in words
    assert "made for 'madeby561/GLM-5.2-MXFP8-NVFP4-NF3-Hybrid" in words
    shutil.rmtree(folder)


def test_the_plugins_warnings_should_reach_vllms_log(plugin_path, registered, tiny_model):
    """N4: a checkpoint's calibration that per-token mode does not use is named in vLLM's log; a
    checkpoint's own calibration is what its layers take, and its identity is logged."""
    import logging
    ckpt = {"nvfp4_mla_outer_scales": {"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": 2, "latent_dim": 512,
                                       "denominator": 2688.0, "scales": [0.01, 0.02]}}
    model = tempfile.mkdtemp(prefix="tiny-ckpt-")
    with open(os.path.join(tiny_model, "config.json")) as f:
        config = dict(json.load(f), **ckpt)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(config, f)
    served = Served(plugin_path, model, VLLM_NVFP4_MLA_DYNAMIC_SCALE="1")
    try:
        assert any("carries calibration" in m for m in served.log.lines(logging.WARNING)), served.log.lines()
        assert [lay.impl._outer_scale(lay) for lay in served.layers.values()] == [None, None]
    finally:
        served.close()
    served = Served(plugin_path, model)
    try:
        assert [lay.impl._outer_scale(lay) for _, lay in sorted(served.layers.items())] == \
            [pytest.approx(0.01), pytest.approx(0.02)]
        assert served.plan.identity.startswith("nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:")
        assert any(f"cache identity {served.plan.identity}" in m for m in served.log.lines(logging.INFO))
    finally:
        served.close()
    shutil.rmtree(model)


def test_a_model_the_environment_disagrees_with_should_not_build(plugin_path, registered, tiny_model):
    """Fail closed before any cache exists: KV_FP8_ROPE, set, must agree with the dtype's layout."""
    words = _refused(plugin_path, tiny_model, serving.DTYPE_432, KV_FP8_ROPE="1")
    assert f"--kv-cache-dtype {serving.DTYPE_432} asks for 432-byte records, but KV_FP8_ROPE='1' says 368-byte " \
           "records: unset KV_FP8_ROPE" in words


def test_a_bad_attention_setting_should_not_build(plugin_path, registered, tiny_model):
    """N9: read by a CUDA context's init, checked when the model is built (before weights load)."""
    words = _refused(plugin_path, tiny_model, NVFP4_MLA_ATTEND_MERGE="bogus")
    assert 'NVFP4_MLA_ATTEND_MERGE="bogus" is not one of: auto, separate, in-launch' in words


def test_shardq_should_be_declared_unsupported(per_token):
    """vLLM 0.34's token-sharded prefill is opt-in per Impl (supports_shardq): declared off, so no
    layer shards its queries (0.33 has no ShardQ)."""
    from vllm.model_executor.layers.attention.sparse_mla_attention import SparseMLACommonImpl
    from nvfp4_mla.vllm_plugin.backend import NvFp4MlaSparseImpl
    assert NvFp4MlaSparseImpl.supports_shardq is False
    assert hasattr(SparseMLACommonImpl, "supports_shardq") == (VERSION != "0.33.0")
    for layer in per_token.layers.values():
        assert not getattr(layer, "use_shardq", False) and not getattr(layer.impl, "use_shardq", False)
