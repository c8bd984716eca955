"""The argument structs of the four calls, built and checked: a device and the caller's arrays in,
a ctypes struct of abi/nvfp4_mla_ops.h out.

One home for the shim's argument rules, used by every way a call reaches the plugin: Context's
one-shot and prepared calls, the PyTorch ops (torch_ops: per signature, and in their fake
implementations while torch.compile traces) and the vLLM plugin's step planning. `device` is a
context's (type, index) pair (Context.device). Every array is checked (dtype, dimensions, fixed
sizes, device, strides, writability) and every scalar by name before any ctypes field could wrap
it; what the plugin checks besides (h in 1..128, unit strides, alignment, the mode rule) it checks
in its own words on every call.

Placeholder describes a PyTorch-like tensor without memory, for the plugin's shape-only entry
(attend_workspace_bytes): the fake implementations and plan_step ask the plugin, not a restated
copy of its rules.
"""

import ctypes as C

from . import _abi
from .arrays import stream_handle, tensor
from .errors import integer, number

LATENT, ROPE, ROW = _abi.LATENT_DIM, _abi.ROPE_DIM, _abi.ROW_DIM
_UINT32_MAX, _INT32_MAX = 2**32 - 1, 2**31 - 1


# ---- Scalars: checked by name before they reach a ctypes field, which would wrap an integer
# (layout=2**32+1 wrote layout 1) or take a bool as 1 (issue 48). Types are refused with TypeError,
# values out of a field's range with ValueError. ----

def code(name, value, hint):
    """An id of a uint32 field (layout, scale mode, writer policy): the plugin checks which ids it knows."""
    return integer(name, value, 0, _UINT32_MAX, hint)


def mode(layout, scale_mode):
    """(layout, scale_mode) as the struct's fields, each checked by name."""
    return (code("layout", layout, "one of nvfp4_mla.LAYOUT_*"),
            code("scale_mode", scale_mode, "nvfp4_mla.SCALE_STATIC or nvfp4_mla.SCALE_PER_TOKEN"))


def policy_id(policy):
    """A writer policy's id from its id or name ("rtn", "mse"); None is rtn. Unknown ids within the
    field go to the plugin as given (it refuses them in its words)."""
    if policy is None:
        return _abi.WRITER_POLICY_RTN
    if isinstance(policy, str):  # any ASCII case, as NVFP4_MLA_WRITER_POLICY (the settings rule)
        name = policy.lower() if policy.isascii() else policy
        if name not in _abi.WRITER_POLICIES:
            raise ValueError(f"writer_policy {policy!r}: expected one of {', '.join(_abi.WRITER_POLICIES)} "
                             "(any case)")
        return _abi.WRITER_POLICIES[name]
    return code("writer_policy", policy, "a policy name (\"rtn\", \"mse\") or nvfp4_mla._abi.WRITER_POLICY_*")


def outer(scale_mode, outer_scale):
    """The caller's outer scale, or the mode's default when it gave none."""
    return _abi.default_outer_scale(scale_mode) if outer_scale is None else number("outer_scale", outer_scale)


def parse_device(text):
    """(type, index) of "cpu", "cuda" or "cuda:N" (N decimal, below 2^31), else ValueError naming the value."""
    raw = str(text)
    if raw == "cpu":
        return _abi.DEVICE_CPU, 0
    kind, colon, index = raw.partition(":")
    if kind == "cuda" and (not colon or (index.isascii() and index.isdigit())):
        if int(index or 0) > _INT32_MAX:  # the int32 device_index would wrap ("cuda:4294967296" opened 0)
            raise ValueError(f"device {text!r}: the index must be below 2^31")
        return _abi.DEVICE_CUDA, int(index or 0)
    raise ValueError(f"device {text!r}: expected 'cpu', 'cuda' or 'cuda:N' with N a device index (0, 1, ...)")


def stream_field(device, value):
    """The struct's stream: None on a CPU device (anything else is refused), else the handle of an int,
    a torch stream (.cuda_stream) or a CuPy stream (.ptr)."""
    if device[0] == _abi.DEVICE_CPU:
        if value is not None:
            raise ValueError("stream: must be None on a CPU context")
        return None
    return stream_handle(value)


def cache_tensor(device, array, layout, written=False):
    """The cache descriptor; its record size is checked here only for a layout the ABI knows (the
    plugin refuses any other id, naming it)."""
    rb = _abi.record_bytes(layout) or None
    t, _ = tensor(array, "cache", (_abi.DTYPE_U8,), 3, device, (None, None, rb), required=True, written=written)
    return t


# ---- The four structs. Shapes are [rows, ...]: the first dimension of every per-row array agrees. ----

def write_args(device, kv_c, k_pe, slot_mapping, cache, *, layout, scale_mode, outer_scale=None,
               capture_max_abs=None, nonfinite_count=None, stream=None, writer_policy=None, out_of_range_count=None):
    """WriteArgs: kv_c [T, 512] and k_pe [T, 64] (bf16, or both f16), slot_mapping [T] int64, the cache
    [blocks, block_size, record] uint8 (written); the optional counters: capture_max_abs [1] f32,
    nonfinite_count [1] int64, out_of_range_count [1] int64 (all written)."""
    layout, scale_mode = mode(layout, scale_mode)
    kv, (_, in_dtype, shape, *_rest) = tensor(kv_c, "kv_c", (_abi.DTYPE_BF16, _abi.DTYPE_F16), 2, device,
                                              (None, LATENT), required=True)
    pe, _ = tensor(k_pe, "k_pe", (in_dtype,), 2, device, (shape[0], ROPE), required=True)
    sl, _ = tensor(slot_mapping, "slot_mapping", (_abi.DTYPE_I64,), 1, device, (shape[0],), required=True)
    cap, _ = tensor(capture_max_abs, "capture_max_abs", (_abi.DTYPE_F32,), 1, device, (1,), written=True)
    cnt, _ = tensor(nonfinite_count, "nonfinite_count", (_abi.DTYPE_I64,), 1, device, (1,), written=True)
    oor, _ = tensor(out_of_range_count, "out_of_range_count", (_abi.DTYPE_I64,), 1, device, (1,), written=True)
    return _abi.WriteArgs(struct_size=C.sizeof(_abi.WriteArgs), layout=layout, scale_mode=scale_mode,
                          outer_scale=outer(scale_mode, outer_scale), writer_policy=policy_id(writer_policy),
                          kv_c=kv, k_pe=pe, slot_mapping=sl, cache=cache_tensor(device, cache, layout, written=True),
                          capture_max_abs=cap.data, nonfinite_count=cnt.data, stream=stream_field(device, stream),
                          out_of_range_count=oor.data)


def gather_args(device, cache, slots, out, *, layout, scale_mode, outer_scale=None, stream=None):
    """GatherArgs: slots [N] int32 (-1: zeros) into out [N, 576] bf16 (written)."""
    layout, scale_mode = mode(layout, scale_mode)
    sl, (_, _, shape, *_rest) = tensor(slots, "slots", (_abi.DTYPE_I32,), 1, device, required=True)
    o, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 2, device, (shape[0], ROW), required=True, written=True)
    return _abi.GatherArgs(struct_size=C.sizeof(_abi.GatherArgs), layout=layout, scale_mode=scale_mode,
                           outer_scale=outer(scale_mode, outer_scale), cache=cache_tensor(device, cache, layout),
                           slots=sl, out=o, stream=stream_field(device, stream))


def attend_args(device, q, slots, cache, out, *, layout, scale_mode, sm_scale, outer_scale=None, valid_len=None,
                lse=None, stream=None):
    """AttendArgs without a workspace: q [n_q, h, 576] bf16, slots [n_q, topk] int32, the optional
    valid_len [n_q] int32, out [n_q, h, 512] bf16 and the optional lse [n_q, h] f32 (both written)."""
    layout, scale_mode = mode(layout, scale_mode)
    qt, (_, _, qshape, *_rest) = tensor(q, "q", (_abi.DTYPE_BF16,), 3, device, (None, None, ROW), required=True)
    st, _ = tensor(slots, "slots", (_abi.DTYPE_I32,), 2, device, (qshape[0], None), required=True)
    vl, _ = tensor(valid_len, "valid_len", (_abi.DTYPE_I32,), 1, device, (qshape[0],))
    ot, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 3, device, (qshape[0], qshape[1], LATENT), required=True,
                   written=True)
    lt, _ = tensor(lse, "lse", (_abi.DTYPE_F32,), 2, device, (qshape[0], qshape[1]), written=True)
    return _abi.AttendArgs(struct_size=C.sizeof(_abi.AttendArgs), layout=layout, scale_mode=scale_mode,
                           outer_scale=outer(scale_mode, outer_scale), sm_scale=number("sm_scale", sm_scale),
                           q=qt, slots=st, valid_len=vl, cache=cache_tensor(device, cache, layout), out=ot, lse=lt,
                           stream=stream_field(device, stream))


def merge_args(device, partial_out, partial_lse, out, *, lse=None, stream=None):
    """MergeArgs: partial_out [P, n_q, h, 512] bf16 or f32 and partial_lse [P, n_q, h] f32 into out
    [n_q, h, 512] bf16 and the optional lse [n_q, h] f32 (both written)."""
    po, (_, _, pshape, *_rest) = tensor(partial_out, "partial_out", (_abi.DTYPE_BF16, _abi.DTYPE_F32), 4, device,
                                        (None, None, None, LATENT), required=True)
    pl, _ = tensor(partial_lse, "partial_lse", (_abi.DTYPE_F32,), 3, device, pshape[:3], required=True)
    ot, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 3, device, (pshape[1], pshape[2], LATENT), required=True,
                   written=True)
    lt, _ = tensor(lse, "lse", (_abi.DTYPE_F32,), 2, device, (pshape[1], pshape[2]), written=True)
    return _abi.MergeArgs(struct_size=C.sizeof(_abi.MergeArgs), partial_out=po, partial_lse=pl, out=ot, lse=lt,
                          stream=stream_field(device, stream))


# ---- Tensors without memory, for the shape-only entry. ----

class Placeholder:
    """What arrays.describe reads of a PyTorch tensor (dtype, device, shape, strides, a data pointer)
    without its memory: the shim's checks run on it unchanged, and the plugin's shape-only entry
    (attend_workspace_bytes reads shapes, never data) takes its address for a pointer. The address is
    one per argument (`role`): distinct, 4 KiB aligned and far apart, so that no check of alignment
    or of overlapping rows refuses a placeholder for being one. strides=None: contiguous."""
    __slots__ = ("dtype", "device", "shape", "_strides", "_address")

    def __init__(self, dtype, device, shape, role, strides=None):
        if strides is None:
            strides, step = [], 1
            for size in reversed(shape):
                strides.insert(0, step)
                step *= size
        self.dtype, self.device, self.shape, self._strides = dtype, device, tuple(shape), tuple(strides)
        self._address = (role + 1) << 40

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._address
