"""Arrays to ABI tensor descriptors, checked before any call.

Accepted: objects exposing __array_interface__ (numpy; CPU memory), __cuda_array_interface__
(CuPy, PyTorch; CUDA memory), and PyTorch tensors directly (which also covers bfloat16, a dtype the
array interfaces cannot name). numpy and CuPy have no bfloat16: a uint16/int16 array of theirs carries
bf16 bits, and the caller says so with the expected dtype. PyTorch has torch.bfloat16, so its int16 and
uint16 tensors hold integers and are refused (bad-inputs-4 N10: they were read as bf16 bits). Strides cross the ABI in elements; a byte stride that is not
a multiple of the element size is refused here. Every array the plugin writes (a cache, an out, an
lse, a counter) must be writable: an array interface whose data flag says read-only (numpy's
writeable=False, np.frombuffer of bytes) is refused, and so is a PyTorch tensor that PyTorch itself
would not let be written in place (one that requires grad; an inference tensor outside
torch.inference_mode()), since a write through a raw pointer would bypass that rule.
"""

from . import _abi

_TYPESTRS = {
    "|u1": _abi.DTYPE_U8, "<u1": _abi.DTYPE_U8,
    "<i4": _abi.DTYPE_I32, "<i8": _abi.DTYPE_I64, "<f4": _abi.DTYPE_F32, "<f2": _abi.DTYPE_F16,
    "<u2": _abi.DTYPE_BF16, "<i2": _abi.DTYPE_BF16, "|V2": _abi.DTYPE_BF16, "<V2": _abi.DTYPE_BF16,
}
_TORCH = {"torch.uint8": _abi.DTYPE_U8, "torch.int32": _abi.DTYPE_I32, "torch.int64": _abi.DTYPE_I64,
          "torch.float32": _abi.DTYPE_F32, "torch.float16": _abi.DTYPE_F16, "torch.bfloat16": _abi.DTYPE_BF16}
_TORCH_INTEGERS16 = ("torch.int16", "torch.uint16")  # integers, not bf16 bits (the module's docstring)
_SIZES = {_abi.DTYPE_U8: 1, _abi.DTYPE_I32: 4, _abi.DTYPE_I64: 8, _abi.DTYPE_F32: 4, _abi.DTYPE_BF16: 2,
          _abi.DTYPE_F16: 2}


class ArrayError(ValueError):
    """An array's dtype, shape, strides or device does not fit the call."""


def is_torch(obj):
    """A PyTorch tensor (told apart by its methods: the shim never imports torch to check)."""
    return hasattr(obj, "data_ptr") and hasattr(obj, "stride") and hasattr(obj, "dtype")


def describe(obj, name):
    """(data pointer, dtype code, shape, element strides, device type, device index) of an array."""
    if obj is None:
        return None
    if is_torch(obj):
        dtype = _TORCH.get(str(obj.dtype))
        if dtype is None:
            if str(obj.dtype) in _TORCH_INTEGERS16:
                raise ArrayError(f"{name}: dtype {obj.dtype} holds integers, not bf16: pass a torch.bfloat16 tensor "
                                 "(a tensor of bf16 bits: .view(torch.bfloat16))")
            raise ArrayError(f"{name}: dtype {obj.dtype} is not supported")
        dev = obj.device
        device = (_abi.DEVICE_CUDA, dev.index or 0) if dev.type == "cuda" else (_abi.DEVICE_CPU, 0)
        return obj.data_ptr(), dtype, tuple(obj.shape), tuple(obj.stride()), device[0], device[1]
    for attr, device in (("__cuda_array_interface__", _abi.DEVICE_CUDA), ("__array_interface__", _abi.DEVICE_CPU)):
        iface = getattr(obj, attr, None)
        if iface is None:
            continue
        dtype = _TYPESTRS.get(iface["typestr"])
        if dtype is None:
            raise ArrayError(f"{name}: typestr {iface['typestr']} is not supported")
        shape = tuple(iface["shape"])
        size = _SIZES[dtype]
        if iface.get("strides") is None:  # C-contiguous
            strides, step = [], 1
            for extent in reversed(shape):
                strides.insert(0, step)
                step *= extent
        else:
            strides = []
            for s in iface["strides"]:
                if s % size:
                    raise ArrayError(f"{name}: byte stride {s} is not a multiple of the {size}-byte element")
                strides.append(s // size)
        if iface.get("mask") is not None:
            raise ArrayError(f"{name}: masked arrays are not supported")
        return iface["data"][0], dtype, shape, tuple(strides), device, 0
    raise ArrayError(f"{name}: {type(obj).__name__} exposes neither __array_interface__ nor "
                     "__cuda_array_interface__")


def read_only(obj):
    """Why the plugin must not write `obj` (words for a message), or None when it may."""
    if is_torch(obj):
        if getattr(obj, "requires_grad", False):  # getattr: tensor-like objects without autograd pass
            return "it requires grad, and PyTorch lets no such tensor be written in place (pass a .detach()ed one)"
        if getattr(obj, "is_inference", lambda: False)():
            import torch  # loaded already: obj is one of its tensors
            if not torch.is_inference_mode_enabled():
                return "it is an inference tensor, which PyTorch lets be written only inside torch.inference_mode()"
        return None
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        iface = getattr(obj, attr, None)
        if iface is not None:
            data = iface.get("data")
            if isinstance(data, tuple) and len(data) > 1 and data[1]:
                return f"it is read-only ({attr}['data'] says so: numpy's writeable=False, a view of bytes, ...)"
            return None
    return None


def tensor(obj, name, dtypes, ndim, device, shape=None, *, required=False, written=False):
    """A checked Tensor: dtype in `dtypes`, `ndim` dims, on `device` (type, index), and each given
    entry of `shape` (None = any) matched; `required`: None is refused (else it is the absent
    optional tensor); `written`: the plugin writes it, so it must be writable (read_only). Returns
    (Tensor, description)."""
    if obj is None and required:
        raise ArrayError(f"{name} is None: this call needs the array")
    if written and obj is not None:
        why = read_only(obj)
        if why:
            raise ArrayError(f"{name}: {why}; the plugin writes into it")
    desc = describe(obj, name)
    t = _abi.Tensor()
    if desc is None:
        return t, None
    ptr, dtype, dims, strides, dev_type, dev_index = desc
    if dtype not in dtypes:
        want = " or ".join(_abi.DTYPE_NAMES[d] for d in dtypes)
        raise ArrayError(f"{name}: dtype {_abi.DTYPE_NAMES[dtype]}, expected {want}")
    if len(dims) != ndim:
        raise ArrayError(f"{name}: {len(dims)} dimensions, expected {ndim}")
    for i, want in enumerate(shape or ()):
        if want is not None and dims[i] != want:
            raise ArrayError(f"{name}: shape[{i}] is {dims[i]}, expected {want}")
    if any(s < 0 for s in strides):
        raise ArrayError(f"{name}: negative strides are not supported")
    if dev_type != device[0] or (dev_type == _abi.DEVICE_CUDA and dev_index != device[1]):
        where = "cpu" if dev_type == _abi.DEVICE_CPU else f"cuda:{dev_index}"
        ctx = "cpu" if device[0] == _abi.DEVICE_CPU else f"cuda:{device[1]}"
        raise ArrayError(f"{name}: lives on {where}, the context is on {ctx}")
    t.data, t.dtype, t.ndim = ptr, dtype, ndim
    for i in range(ndim):
        t.shape[i], t.strides[i] = dims[i], strides[i]
    t.device_type, t.device_index = dev_type, dev_index
    return t, desc


def stream_handle(stream):
    """A cudaStream_t as an integer: None, an int, a torch stream (.cuda_stream), a CuPy stream (.ptr)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)


def empty_bytes_like(obj, nbytes):
    """A new uint8 array of `nbytes` from the library and on the device of `obj` (PyTorch, CuPy or
    numpy), for scratch the plugin asks for."""
    if is_torch(obj):
        import torch
        return torch.empty(nbytes, dtype=torch.uint8, device=obj.device)
    if hasattr(obj, "__cuda_array_interface__"):
        import cupy
        return cupy.empty(nbytes, dtype=cupy.uint8)
    import numpy
    return numpy.empty(nbytes, dtype=numpy.uint8)
