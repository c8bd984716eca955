"""Prepared calls: the hot path of a serving engine's decode loop (issue 17; merge: issue 15).

A one-shot `Context.write/gather/attend` describes and checks every array on every call (tens of
microseconds of Python with PyTorch tensors). A prepared call does that once, when the engine binds
its cache and buffers (`Context.prepare_write/prepare_gather/prepare_attend/prepare_merge`, the same checks in the
same words), keeps the ctypes argument struct, and per call writes only what changes into it through
C views made at bind time: data pointers, the row counts (shape[0] of the per-row arrays; merge's
partials: shape[1], n_q, their P stays the bound one), the stream. Two forms:

    call.run(n=None, stream=...)       the bound arrays' first n rows (default: all); no Python
                                       allocation at all (the shim's tests check it with tracemalloc),
                                       what a CUDA graph or persistent buffers use;
    call(arrays..., stream=...)        new arrays of the bound kind and layout: reads each one's data
                                       pointer, row count and layout, and of each output whether it
                                       may be written (arrays.read_only; a few temporaries).

What each call re-checks: n, an integer within [0, bound rows] (run); the presence of the optional
arrays bound (lse, valid_len); in the array form, each array's kind (library) and, in one comparison,
its layout: dtype, device, every stride and every dimension but the rows (issue 48: a uint8 out bound
as bf16 was written 8 MiB into 4 MiB), so that an array of the bound layout holds exactly what the
descriptor addresses for its row count (about 0.3 us an array with numpy); and, in the plugin,
everything the plugin always checks (struct, mode, dtypes and shapes of the descriptors, row counts
agreeing, outputs apart from the inputs, alignment of the pointers, workspace size). What it trusts:
that the memory behind an array's data pointer is the array's. The one-shot calls stay the checked
path for everything else.

Stream: `stream=` at bind is the default of every call; a call may pass another (an int handle, a
torch or CuPy stream; None = the legacy default stream). CPU contexts take None only. A prepared
call rewrites its struct: like its context, it is called by one thread at a time.

Host time: run() repeats its struct, so from its fourth eager call on the plugin launches the call as one
prebuilt CUDA graph of its kernels (2-2.6 us of host time on the H200's host, against 3.5-4.5 us a
kernel and two kernels for a split call; docs/architecture.md, kernels/attend/attend_launches.h).

Capture: run() and the array form only write host memory and call the plugin's stream-ordered entry,
so both may be captured in a CUDA graph (torch.cuda.graph, cudaStreamBeginCapture) on the capture
stream, passed as `stream=`. Workspace (the rule's one home is workspace.py): a prepared attend holds its
workspace (sized at bind for every row count up to the bound q's) for as long as it lives, and a captured attend reads that
workspace on every replay: keep the prepared attend (or the `workspace=` you gave) alive as long as
any graph that captured it. Without `workspace=`, prepared attends bound to one stream share the
context's workspace for that stream, which is safe while their calls run in order on one stream (a
decode loop, or graphs replayed on one stream); attends that run concurrently on several streams
take a workspace each (bind each with its stream, or pass `workspace=`).
"""

import ctypes as C

from . import _abi
from .arrays import ArrayError, is_torch, read_only, stream_handle, tensor
from .errors import check, integer, member

BOUND = object()  # the stream given at bind time


def _handle(stream):
    """A stream argument as the struct's void*, with ints (the hot case) passed straight through."""
    return stream if stream is None or type(stream) is int else stream_handle(stream)


def _readers(obj, dim=0):
    """(data pointer, row count, layout) readers for arrays of obj's kind, chosen once at bind; the row
    count is the size of dimension `dim`, the layout everything else the bound descriptor fixes: the
    dtype, the other dimensions and every stride. An array of the bound layout holds exactly the
    elements the descriptor addresses for its row count, so one comparison per array and call keeps a
    wrong dtype or a smaller array from being read or written past its end."""
    rows = len if dim == 0 else (lambda a: a.shape[dim])
    if is_torch(obj):
        size, stride = type(obj).size, type(obj).stride
        return (type(obj).data_ptr, lambda t: size(t, dim),
                lambda t: (t.dtype, t.device, stride(t), t.shape[:dim], t.shape[dim + 1:]))
    if hasattr(obj, "strides") and hasattr(obj, "dtype") and hasattr(obj, "shape"):  # numpy, CuPy
        layout = lambda a: (a.dtype, getattr(a, "device", None), a.strides, a.shape[:dim], a.shape[dim + 1:])  # noqa: E731
        if hasattr(obj, "__cuda_array_interface__"):
            if hasattr(getattr(obj, "data", None), "ptr"):  # CuPy: the view's own address
                return (lambda a: a.data.ptr), rows, layout
            return (lambda a: a.__cuda_array_interface__["data"][0]), rows, layout
        return (lambda a: a.__array_interface__["data"][0]), rows, layout
    attr = "__cuda_array_interface__" if hasattr(obj, "__cuda_array_interface__") else "__array_interface__"

    def iface_layout(a):  # any other array-interface object: the interface's own words
        iface = getattr(a, attr)
        return iface["typestr"], iface.get("strides"), tuple(iface["shape"][:dim]), tuple(iface["shape"][dim + 1:])
    return (lambda a: getattr(a, attr)["data"][0]), rows, iface_layout


class _Field:
    """One tensor field of a bound struct: its data pointer and row count (shape[dim]) as C views
    sharing the struct's memory (writing them writes the struct), and the readers of the bound
    array's kind."""
    __slots__ = ("data", "rows", "bound_data", "bound_rows", "ptr_of", "rows_of", "layout_of", "bound_layout", "kind",
                 "name", "written")

    def __init__(self, args, name, obj, dim=0, written=False):
        offset = getattr(type(args), name).offset
        self.data = C.c_void_p.from_buffer(args, offset + _abi.Tensor.data.offset)
        self.rows = C.c_int64.from_buffer(args, offset + _abi.Tensor.shape.offset + dim * C.sizeof(C.c_int64))
        self.bound_data, self.bound_rows = self.data.value, self.rows.value
        self.ptr_of, self.rows_of, self.layout_of = _readers(obj, dim)
        self.bound_layout = self.layout_of(obj)
        self.kind = type(obj)
        self.name, self.written = name, written  # written: the plugin writes it, so it must be writable

    def set(self, obj):
        """Point the field at `obj`, of the bound array's kind and layout (dtype, strides, the dimensions
        but the rows): an array of another dtype or shape is refused by name before the call."""
        if type(obj) is not self.kind:
            raise ArrayError(f"prepared call bound to {self.kind.__name__} arrays got a {type(obj).__name__}")
        if self.layout_of(obj) != self.bound_layout:
            raise ArrayError(f"{self.name}: (dtype, strides, other dimensions) {self.layout_of(obj)} differ from "
                             f"the bound array's {self.bound_layout}: the prepared call reads and writes the bound "
                             "layout (bind another call for this one)")
        if self.written:
            why = read_only(obj)
            if why:
                raise ArrayError(f"{self.name}: {why}; the plugin writes into it")
        self.data.value = self.ptr_of(obj)
        self.rows.value = self.rows_of(obj)

    def restore(self, rows):
        self.data.value = self.bound_data
        self.rows.value = rows


# A prototype without argtypes: ctypes turns a c_void_p argument into a new parameter object on every
# call (a Python allocation), but passes a parameter object made once (c_void_p.from_param, byref) as
# it is. The entries take (context, const args*) and return a 32-bit status (abi/nvfp4_mla.h).
_ENTRY = C.CFUNCTYPE(_abi.STATUS)


class PreparedCall:
    """What every prepared call shares: the struct, its entry, the stream view, the bound arrays (the
    PyTorch ops' kept signatures are prepared calls too, torch_ops.py)."""

    def __init__(self, ctx, op, args, keep):
        handle = ctx.live(f"prepare_{op}")
        self._ctx, self._plugin, self._op, self._args, self._keep = ctx, ctx.plugin, op, args, keep
        self._fn = _ENTRY(C.cast(member(ctx.plugin, op), C.c_void_p).value)
        self._ctx_arg, self._ref = C.c_void_p.from_param(handle.value), C.byref(args)
        self._stream = C.c_void_p.from_buffer(args, type(args).stream.offset)
        self._bound_stream = self._stream.value
        self._moved = False  # the array form pointed the fields elsewhere; run() points them back
        self._spare = C.c_int64()  # where an absent optional field's row count goes

    def _launch(self, stream):
        if self._ctx.handle is None:
            raise ValueError(f"{self._op}: the context of this prepared call is closed")
        self._stream.value = self._bound_stream if stream is BOUND else _handle(stream)
        status = self._fn(self._ctx_arg, self._ref)
        if status:
            check(self._plugin, status, self._op)

    def _restore(self, n):
        """After the array form: the bound arrays' first n rows again (self._fields, set by each class)."""
        for f in self._fields:
            f.restore(n)
        self._moved = False

    def _rows(self, n):
        if n is None:
            return self._max_rows
        if type(n) is not int:  # the hot path: one type test; a bool or 1.9 is not a row count
            n = integer("n", n, 0, self._max_rows, f"the bound arrays' row count 0..{self._max_rows}")
        if not 0 <= n <= self._max_rows:
            raise ValueError(f"{self._op}: n = {n}, the bound arrays hold 0..{self._max_rows} rows")
        return n


class PreparedWrite(PreparedCall):
    """Context.write bound to kv_c, k_pe, slot_mapping and the cache (and capture/counter arrays)."""

    def __init__(self, ctx, args, arrays):
        kv_c, k_pe, slot_mapping = arrays[:3]
        super().__init__(ctx, "write", args, arrays)
        self._kv, self._pe, self._sl = (_Field(args, "kv_c", kv_c), _Field(args, "k_pe", k_pe),
                                        _Field(args, "slot_mapping", slot_mapping))
        self._max_rows = self._kv.bound_rows
        self._fields = (self._kv, self._pe, self._sl)

    def run(self, n=None, stream=BOUND):
        """Write the bound arrays' first n tokens (default all)."""
        n = self._rows(n)
        if self._moved:
            self._restore(n)
        self._kv.rows.value = self._pe.rows.value = self._sl.rows.value = n
        self._launch(stream)

    def __call__(self, kv_c, k_pe, slot_mapping, stream=BOUND):
        """Write these tokens (arrays of the bound kind, dtype and strides) into the bound cache."""
        self._moved = True
        self._kv.set(kv_c), self._pe.set(k_pe), self._sl.set(slot_mapping)
        self._launch(stream)


class PreparedGather(PreparedCall):
    """Context.gather bound to the cache, slots and out."""

    def __init__(self, ctx, args, arrays):
        super().__init__(ctx, "gather", args, arrays)
        self._slots, self._out = _Field(args, "slots", arrays[1]), _Field(args, "out", arrays[2], written=True)
        self._max_rows = self._slots.bound_rows
        self._fields = (self._slots, self._out)

    def run(self, n=None, stream=BOUND):
        """Gather the bound slots' first n rows into the bound out's first n rows (default all)."""
        n = self._rows(n)
        if self._moved:
            self._restore(n)
        self._slots.rows.value = self._out.rows.value = n
        self._launch(stream)

    def __call__(self, slots, out, stream=BOUND):
        self._moved = True
        self._slots.set(slots), self._out.set(out)
        self._launch(stream)


class PreparedAttend(PreparedCall):
    """Context.attend bound to q, slots, the cache, out (and lse, valid_len), with a workspace held
    for every row count up to the bound q's."""

    def __init__(self, ctx, args, arrays, workspace):
        q, slots, _cache, out, valid_len, lse = arrays
        super().__init__(ctx, "attend", args, arrays)
        self._q, self._slots = _Field(args, "q", q), _Field(args, "slots", slots)
        self._out = _Field(args, "out", out, written=True)
        self._lse = _Field(args, "lse", lse, written=True) if lse is not None else None
        self._len = _Field(args, "valid_len", valid_len) if valid_len is not None else None
        present = [f for f in (self._q, self._slots, self._out, self._lse, self._len) if f is not None]
        self._fields = tuple(present)
        # Absent optional fields keep shape[0] 0: their row count goes to a spare C integer.
        self._lse_rows = self._lse.rows if self._lse else self._spare
        self._len_rows = self._len.rows if self._len else self._spare
        self._max_rows = self._q.bound_rows
        need = ctx.workspace.need(args, present)  # the largest over 1..bound rows (workspace.py)
        if workspace is None:
            workspace = ctx.workspace.take(self._bound_stream, need, q)
        args.workspace, _ = tensor(workspace, "workspace", (_abi.DTYPE_U8,), 1, ctx.device, written=True)
        if args.workspace.shape[0] < need:
            raise ArrayError(f"workspace: {args.workspace.shape[0]} bytes, these shapes need up to {need} "
                             f"(attend_workspace_bytes over 1..{self._max_rows} queries)")
        self.workspace = workspace  # held for the life of this call and of any graph that captured it

    def run(self, n=None, stream=BOUND):
        """Attend for the bound arrays' first n queries (default all)."""
        n = self._rows(n)
        if self._moved:
            self._restore(n)
        self._q.rows.value = self._slots.rows.value = self._out.rows.value = n
        self._lse_rows.value = self._len_rows.value = n
        self._launch(stream)

    def __call__(self, q, slots, out, lse=None, valid_len=None, stream=BOUND):
        """Attend for these queries (arrays of the bound kind, dtype and strides; lse and valid_len
        exactly when they were bound) over the bound cache."""
        if (lse is None) != (self._lse is None) or (valid_len is None) != (self._len is None):
            raise ArrayError("attend: pass lse and valid_len exactly when the prepared call was bound with them")
        self._moved = True
        self._q.set(q), self._slots.set(slots), self._out.set(out)
        if lse is not None:
            self._lse.set(lse)
        if valid_len is not None:
            self._len.set(valid_len)
        self._launch(stream)


class PreparedMerge(PreparedCall):
    """Context.merge bound to partial_out, partial_lse, out (and lse): per call the queries' count
    n_q changes, P (the group size) stays the bound one."""

    def __init__(self, ctx, args, arrays):
        partial_out, partial_lse, out, lse = arrays
        super().__init__(ctx, "merge", args, arrays)
        self._po, self._pl = _Field(args, "partial_out", partial_out, 1), _Field(args, "partial_lse", partial_lse, 1)
        self._out = _Field(args, "out", out, written=True)
        self._lse = _Field(args, "lse", lse, written=True) if lse is not None else None
        self._lse_rows = self._lse.rows if self._lse else self._spare
        self._max_rows = self._out.bound_rows
        self._fields = tuple(f for f in (self._po, self._pl, self._out, self._lse) if f is not None)

    def run(self, n=None, stream=BOUND):
        """Merge the first n queries of the bound arrays (default all)."""
        n = self._rows(n)
        if self._moved:
            self._restore(n)
        self._po.rows.value = self._pl.rows.value = self._out.rows.value = self._lse_rows.value = n
        self._launch(stream)

    def __call__(self, partial_out, partial_lse, out, lse=None, stream=BOUND):
        """Merge these arrays (of the bound kind, dtype, strides and P; lse exactly when bound)."""
        if (lse is None) != (self._lse is None):
            raise ArrayError("merge: pass lse exactly when the prepared call was bound with it")
        self._moved = True
        self._po.set(partial_out), self._pl.set(partial_lse), self._out.set(out)
        if lse is not None:
            self._lse.set(lse)
        self._launch(stream)
