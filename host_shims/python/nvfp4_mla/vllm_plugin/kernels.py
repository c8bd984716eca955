"""The NVFP4_MLA_SPARSE Impl's bodies as plain functions over vLLM-shaped tensors: PyTorch and
nvfp4_mla.torch_ops only, no vLLM, so they are tested where vLLM cannot be installed (the GPU
machine: host_shims/python/tests/test_vllm_kernels.py) and timed there (bench/vllm_decode_step.py).

What vLLM 0.33's sparse MLA layer hands an Impl (vllm/model_executor/layers/attention/
sparse_mla_attention.py, vllm/models/deepseek_v32/attention.py):

  kv_c_normed   [T, 512] bf16         the normed latent of the step's tokens
  k_pe          [T, 1, 64] or [T, 64] their RoPE keys, after RoPE
  slot_mapping  [T'] int64            block * block_size + offset, T' <= T (the first T' tokens are
                                      written), -1 for padding (skipped)
  kv_cache      [num_blocks, block_size, record] uint8 (or those bytes viewed as float8_e4m3fn, as
                                      MLAAttention.forward_impl views quantized caches); the block
                                      stride may exceed a page (other layers' pages in between)
  q             (q_nope [n, h, 512], q_pe [n, h, 64]) bf16, or q [n, h, 576]
  topk          [n, K] int32          physical rows: block * block_stride_rows + offset, as
                                      flat_kv_row_view numbers them; -1 unused
  valid_counts  [n] int32             the valid entries of each row, which vLLM's top-k conversion
                                      leaves in front (its FA3 and trtllm-gen kernels read only them)
  returns       out [n, h, 512] bf16, lse [n, h] f32 (natural log; -inf and zeros for a row with no
                                      valid entry)

The writer takes the cache as vLLM lays it out (the plugin honours the block stride); attend takes
the same bytes as flat rows, [rows, 1, record], so that vLLM's physical top-k rows are the plugin's
slots unchanged and the plugin reads records at row * record (its contiguous-cache path).
"""

import torch

from .. import _abi
from .. import torch_ops
from ..context import Context
from ..loader import require

LATENT, ROPE, ROW = _abi.LATENT_DIM, _abi.ROPE_DIM, _abi.ROW_DIM


def as_bytes(kv_cache):
    """The cache's bytes as uint8 (a view; vLLM views quantized caches as float8_e4m3fn)."""
    if kv_cache.dtype == torch.uint8:
        return kv_cache
    if kv_cache.element_size() != 1:
        raise ValueError(f"kv_cache: {kv_cache.dtype} is not a byte cache; the records are uint8 "
                         "[num_blocks, block_size, record]")
    return kv_cache.view(torch.uint8)


def flat_rows(kv_cache):
    """The cache as the plugin's readers take vLLM's physical rows: [rows, 1, record] over the same
    bytes, row = block * block_stride_rows + offset (vLLM's flat_kv_row_view)."""
    cache = as_bytes(kv_cache)
    if cache.dim() != 3:
        raise ValueError(f"kv_cache: shape {tuple(cache.shape)}, expected [num_blocks, block_size, record]")
    num_blocks, block_size, record = cache.shape
    if cache.stride(2) != 1 or cache.stride(1) != record or cache.stride(0) % record:
        raise ValueError(f"kv_cache: strides {cache.stride()} are not whole records (record {record} bytes): "
                         "vLLM's physical rows would not address records")
    stride_rows = cache.stride(0) // record
    rows = (num_blocks - 1) * stride_rows + block_size if num_blocks else 0
    return cache.as_strided((rows, 1, record), (record, record, 1))


def query(q):
    """[n, h, 576] bf16 from vLLM's (q_nope, q_pe) pair (one concatenation) or a packed query."""
    if isinstance(q, (tuple, list)):
        q_nope, q_pe = q
        return torch.cat((q_nope, q_pe), dim=-1)
    return q if q.stride(-1) == 1 else q.contiguous()


def cache_update(ops, kv_c_normed, k_pe, kv_cache, slot_mapping, *, outer_scale=None):
    """Write the step's tokens into their slots (MLAAttentionImpl.do_kv_cache_update's body).
    `ops`: a torch_ops.BoundOps of the serving format; outer_scale: the layer's (static mode)."""
    if kv_cache.numel() == 0:  # vLLM's profiling run binds empty caches
        return
    slots = slot_mapping.reshape(-1)
    n = slots.shape[0]
    if kv_c_normed.shape[0] < n:
        raise ValueError(f"cache update: {n} slots for {kv_c_normed.shape[0]} tokens")
    pe = k_pe.reshape(k_pe.shape[0], ROPE)
    ops.write(kv_c_normed[:n], pe[:n], slots, as_bytes(kv_cache), outer_scale=outer_scale)


def forward_mqa(ops, q, kv_cache, topk, valid_counts, *, sm_scale, outer_scale=None):
    """Sparse MLA attention of every row, decode, MTP and prefill alike, straight from the records
    (SparseMLACommonImpl._forward_mqa_kernel's body): (out [n, h, 512] bf16, lse [n, h] f32)."""
    return ops.attend(query(q), topk, flat_rows(kv_cache), sm_scale=sm_scale, outer_scale=outer_scale,
                      valid_len=valid_counts)


# ---- One context per device and process, and the format bound to it. ----

_bound = {}  # (plugin path, device, layout, scale mode, writer policy) -> BoundOps


def _device_name(device):
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.current_device() if device.index is None else device.index}"
    return "cpu"


def bound_ops(plugin, device, layout, scale_mode, writer_policy=_abi.WRITER_POLICY_RTN, log=None, environ=None):
    """The torch ops of this serving format on `device`: one plugin context a device and process,
    made at the first call (outside any CUDA-graph capture: init probes the device) and refused,
    in the C loader's words, when the device's runtime capabilities cannot serve the format. `log`
    and `environ` go to the context (Context: the host's log callback, the settings snapshot)."""
    name = _device_name(device)
    key = (plugin.path, name, layout, scale_mode, writer_policy)
    ops = _bound.get(key)
    if ops is None:
        ctx = next((o.context for k, o in _bound.items() if k[:2] == key[:2]), None) \
            or Context(plugin, name, log=log, environ=environ)
        backend = "backend.cuda" if name.startswith("cuda") else "backend.cpu"
        require(plugin, layout, scale_mode, available=ctx.capability_bits,
                extra=_abi.CAP["op.write"] | _abi.CAP["op.attend"] | _abi.CAP[backend]
                | _abi.writer_policy_cap(writer_policy))
        ops = _bound[key] = torch_ops.bind(ctx, layout=layout, scale_mode=scale_mode, writer_policy=writer_policy)
    return ops


class _Shape(torch_ops._Described):
    """A tensor's description without its memory, for the plugin's shape-only entry
    (attend_workspace_bytes reads shapes, never data): contiguous strides and a placeholder address,
    one per argument (`role`), distinct and 4 KiB aligned, which the plugin's checks take for a
    pointer and nothing dereferences."""
    __slots__ = ("_address",)

    def __init__(self, dtype, shape, device, role):
        strides, step = [], 1
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
        super().__init__(torch.empty(0, dtype=dtype, device=device), tuple(shape), tuple(strides))
        self._address = (role + 1) << 40

    def data_ptr(self):
        return self._address


_needs = {}  # (context, format, shapes) -> the workspace bytes the plugin asked for
_on_device = {}  # torch.device -> a tensor of no elements there: what the grown workspace's device is read from


def _device_tensor(device):
    """A tensor of no elements on `device`, made once (empty_bytes_like reads only its device). It holds
    no memory, so keeping it pins nothing, and no graph captures it: plan_step grows the workspace only
    outside a capture."""
    t = _on_device.get(device)
    if t is None:
        t = _on_device[device] = torch.empty(0, device=device)
    return t


def plan_step(ops, rows, heads, topk, record, *, outer_scale=None):
    """A step's attend, planned before the forward (the metadata builder's build(), outside any
    capture): the plugin checks the shapes (a refusal raises here, in its words, not inside a
    captured forward) and says the scratch they need, which the context's kept workspace for the
    current stream is grown to, so that eager steps allocate none. The plugin is asked once per
    shape; returns the bytes (0: none)."""
    if rows == 0:
        return 0
    ctx = ops.context
    device = torch.device("cpu") if ctx.device[0] == _abi.DEVICE_CPU else torch.device("cuda", ctx.device[1])
    key = (id(ctx), ops.layout, ops.scale_mode, outer_scale, rows, heads, topk, record)
    need = _needs.get(key)
    if need is None:
        args = ctx._attend_args(_Shape(torch.bfloat16, (rows, heads, ROW), device, 0),
                                _Shape(torch.int32, (rows, topk), device, 1),
                                _Shape(torch.uint8, (1, 1, record), device, 2),
                                _Shape(torch.bfloat16, (rows, heads, LATENT), device, 3), ops.layout, ops.scale_mode,
                                1.0, outer_scale, _Shape(torch.int32, (rows,), device, 4),
                                _Shape(torch.float32, (rows, heads), device, 5), None)
        need = _needs[key] = ctx.attend_workspace_bytes(args)
    if need and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        ctx._workspace(torch_ops._stream(ctx), need, _device_tensor(device))
    return need


# ---- What attend computes, in float32 from the records the plugin's gather gives back. ----

def reference_mqa(ops, q, kv_cache, topk, valid_counts, *, sm_scale, outer_scale=None, chunk=16):
    """The attention forward_mqa computes, in float32 over the records dequantised by the plugin's
    gather (bf16, upcast): entries past a row's valid count or -1 have no weight; a row without any
    gives zeros and lse -inf. For tests and the benchmark's checks (memory: chunk x K x 576 floats)."""
    qf, rows = query(q).float(), flat_rows(kv_cache)
    n, heads, k = qf.shape[0], qf.shape[1], topk.shape[1]
    idx = topk.to(torch.int32).clone()
    if valid_counts is not None:
        past = torch.arange(k, device=idx.device)[None, :] >= valid_counts.to(idx.device)[:, None].long()
        idx[past] = -1
    out = torch.zeros(n, heads, LATENT, dtype=torch.float32, device=qf.device)
    lse = torch.full((n, heads), float("-inf"), dtype=torch.float32, device=qf.device)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        part = idx[s:e].reshape(-1).contiguous()
        keys = ops.gather(rows, part, outer_scale=outer_scale).float().view(e - s, k, ROW)
        scores = torch.einsum("nhd,nkd->nhk", qf[s:e], keys) * sm_scale
        scores = scores.masked_fill((idx[s:e] < 0)[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - row_lse[..., None]).nan_to_num(0.0)
        out[s:e] = torch.einsum("nhk,nkd->nhd", weights, keys[..., :LATENT])
        lse[s:e] = row_lse
    return out, lse
