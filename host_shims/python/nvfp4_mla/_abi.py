"""ctypes mirrors of the ABI 1 headers (abi/nvfp4_mla*.h).

Every size and member offset, every constant and the results of every rule of nvfp4_mla_record.h
here are checked against the C compiler's by tests/test_layout.py, which reads the layout manifest
the build emits (host_shims/python/layout_manifest.c). Change the header and this file together,
and only as abi/CHANGELOG.md allows.
"""

import ctypes as C

ABI_MAJOR = 1
ABI_MINOR = 1
ABI_MAGIC = 0x4D34464E
ENTRY_SYMBOL = "nvfp4_mla_plugin_v1"
PLUGIN_ENV = "NVFP4_MLA_PLUGIN"
PLUGIN_FILE = "libnvfp4_mla.so"
RECORD_FORMAT = "nvfp4_ds_mla"

# Status codes (frozen).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_OUT_OF_MEMORY = 3
ERR_DEVICE = 4
ERR_IO = 5
ERR_CONFIG = 6
ERR_VERSION = 7
ERR_INTERNAL = 8

# ---- The record contract (abi/nvfp4_mla_record.h): layouts, sizes, offsets and its rules. ----
LAYOUT_FP8_ROPE_368 = 1
LAYOUT_BF16_ROPE_432 = 2
LAYOUT_FP8_DS_MLA_656 = 3  # the 656-byte fp8_ds_mla record (attend only: the baseline readers)
RECORD_BYTES_368, RECORD_BYTES_432, RECORD_BYTES_656 = 368, 432, 656
RECORD_BYTES = {LAYOUT_FP8_ROPE_368: RECORD_BYTES_368, LAYOUT_BF16_ROPE_432: RECORD_BYTES_432,
                LAYOUT_FP8_DS_MLA_656: RECORD_BYTES_656}
LAYOUT_NAMES = {LAYOUT_FP8_ROPE_368: "fp8_rope_368", LAYOUT_BF16_ROPE_432: "bf16_rope_432",
                LAYOUT_FP8_DS_MLA_656: "fp8_ds_mla_656"}
LATENT_DIM, ROPE_DIM, ROW_DIM = 512, 64, 576
SCALE_STATIC = 1
SCALE_PER_TOKEN = 2

GROUP_SIZE, GROUPS = 16, 32
RECORD_PAYLOAD_OFFSET = 0
RECORD_GROUP_SCALE_OFFSET = 256
RECORD_ROPE_SCALE_OFFSET = 288
RECORD_TOKEN_SCALE_OFFSET = 292
RECORD_PAD_OFFSET = 296
RECORD_ROPE_OFFSET = 304
FP8_656_TILE_SIZE, FP8_656_TILES = 128, 4
FP8_656_TILE_SCALE_OFFSET = 512
FP8_656_ROPE_OFFSET = 528

# nvfp4_mla_mode_check results.
MODE_OK = 0
MODE_UNKNOWN_LAYOUT = 1
MODE_LAYOUT_NOT_FOR_OP = 2
MODE_UNKNOWN_SCALE_MODE = 3
MODE_PER_TOKEN_NEEDS_368 = 4
MODE_PER_TOKEN_SCALE = 5
MODE_STATIC_SCALE = 6
MODE_FP8_656_SCALE = 7

DTYPE_U8, DTYPE_I32, DTYPE_I64, DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 1, 2, 3, 4, 5, 6
DTYPE_NAMES = {DTYPE_U8: "u8", DTYPE_I32: "i32", DTYPE_I64: "i64", DTYPE_F32: "f32", DTYPE_BF16: "bf16",
               DTYPE_F16: "f16"}
DEVICE_CPU = 1
DEVICE_CUDA = 2

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 1, 2, 3, 4

# Where the per-layer outer scales came from (nvfp4_mla_config_info_t.scale_source).
SCALE_SOURCE_NONE, SCALE_SOURCE_ENV_FILE, SCALE_SOURCE_CHECKPOINT_INLINE = 0, 1, 2
SCALE_SOURCE_CHECKPOINT_FILE, SCALE_SOURCE_PER_TOKEN = 3, 4

# Writer policies (NVFP4_MLA_FOR_EACH_WRITER_POLICY): name -> id, in id order. Readers take none.
WRITER_POLICY_RTN = 0
WRITER_POLICY_MSE = 1
WRITER_POLICY_COUNT = 2
WRITER_POLICIES = {"rtn": WRITER_POLICY_RTN, "mse": WRITER_POLICY_MSE}

# Capability bits and names (NVFP4_MLA_FOR_EACH_CAPABILITY), in bit order.
CAPABILITIES = [
    ("backend.cpu", 1 << 0),
    ("backend.cuda", 1 << 1),
    ("layout.fp8_rope_368", 1 << 2),
    ("layout.bf16_rope_432", 1 << 3),
    ("scale.static_outer", 1 << 4),
    ("write.per_token_scale", 1 << 5),
    ("read.latent_scale_per_token", 1 << 6),
    ("op.write", 1 << 7),
    ("op.gather", 1 << 8),
    ("op.attend", 1 << 9),
    ("write.capture_max_abs", 1 << 10),
    ("config.cache_identity", 1 << 11),
    ("read.fp8_ds_mla_656", 1 << 12),
    ("write.policy_mse", 1 << 13),
    ("op.merge_partials", 1 << 14),
]
CAP = {name: bit for name, bit in CAPABILITIES}


def cap_name(bit):
    for name, b in CAPABILITIES:
        if b == bit:
            return name
    return "unknown"


def writer_policy_name(policy):
    """nvfp4_mla_writer_policy_name: "rtn", "mse", or "unknown"."""
    return next((name for name, p in WRITER_POLICIES.items() if p == policy), "unknown")


def writer_policy_cap(policy):
    """nvfp4_mla_writer_policy_cap: the capability a writer needs to serve `policy` (rtn: none)."""
    return CAP["write.policy_mse"] if policy == WRITER_POLICY_MSE else 0


# ---- The rules of nvfp4_mla_record.h, function for function (tests/test_layout.py compares their
# results with the C functions' over every layout, mode and operation the manifest lists). ----
_OPS = CAP["op.write"] | CAP["op.gather"] | CAP["op.attend"]
_FLT_MIN, _FLT_MAX = 2.0 ** -126, (2 - 2.0 ** -23) * 2.0 ** 127


def record_bytes(layout):
    """Bytes of one record of `layout`; 0 for an unknown id."""
    return RECORD_BYTES.get(layout, 0)


def layout_name(layout):
    return LAYOUT_NAMES.get(layout, "unknown")


def layout_ops(layout):
    """The operations (their op.* bits) a layout serves: all three for NVFP4, attend for 656."""
    if layout in (LAYOUT_FP8_ROPE_368, LAYOUT_BF16_ROPE_432):
        return _OPS
    return CAP["op.attend"] if layout == LAYOUT_FP8_DS_MLA_656 else 0


def layout_has_mode(layout, scale_mode):
    if scale_mode == SCALE_PER_TOKEN:
        return layout == LAYOUT_FP8_ROPE_368
    return scale_mode == SCALE_STATIC and record_bytes(layout) != 0


def _f32(value):
    return C.c_float(value).value  # the value as the C struct's float field holds it


def mode_check(op, layout, scale_mode, outer_scale):
    """MODE_OK or the first thing wrong with a call of `op` (one op.* bit)."""
    outer = _f32(outer_scale)
    if not record_bytes(layout):
        return MODE_UNKNOWN_LAYOUT
    if not layout_ops(layout) & op:
        return MODE_LAYOUT_NOT_FOR_OP
    if layout == LAYOUT_FP8_DS_MLA_656:
        return MODE_OK if scale_mode == SCALE_STATIC and outer == 1.0 else MODE_FP8_656_SCALE
    if scale_mode == SCALE_PER_TOKEN:
        if not layout_has_mode(layout, scale_mode):
            return MODE_PER_TOKEN_NEEDS_368
        return MODE_PER_TOKEN_SCALE if outer != 0.0 else MODE_OK
    if scale_mode != SCALE_STATIC:
        return MODE_UNKNOWN_SCALE_MODE
    return MODE_OK if _FLT_MIN <= outer <= _FLT_MAX else MODE_STATIC_SCALE


def default_outer_scale(scale_mode):
    """The outer scale a call passes when its caller names none."""
    return 0.0 if scale_mode == SCALE_PER_TOKEN else 1.0


def caps_needed(ops, layout, scale_mode):
    """Every capability bit the operations `ops` (op.* bits) need for `layout` in `scale_mode`."""
    if layout == LAYOUT_FP8_DS_MLA_656:
        return ops | CAP["read.fp8_ds_mla_656"]
    need = ops | {LAYOUT_FP8_ROPE_368: CAP["layout.fp8_rope_368"],
                  LAYOUT_BF16_ROPE_432: CAP["layout.bf16_rope_432"]}.get(layout, 0)
    if scale_mode != SCALE_PER_TOKEN:
        return need | CAP["scale.static_outer"]
    if ops & CAP["op.write"]:
        need |= CAP["write.per_token_scale"]
    if ops & (CAP["op.gather"] | CAP["op.attend"]):
        need |= CAP["read.latent_scale_per_token"]
    return need


MAX_DIMS = 4


class Header(C.Structure):
    _fields_ = [("magic", C.c_uint32), ("struct_size", C.c_uint32), ("abi_major", C.c_uint16),
                ("abi_minor", C.c_uint16), ("reserved", C.c_uint32)]


class Capability(C.Structure):
    _fields_ = [("name", C.c_char_p), ("revision", C.c_uint32), ("reserved", C.c_uint32), ("bit", C.c_uint64)]


class Tensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int32), ("ndim", C.c_int32),
                ("shape", C.c_int64 * MAX_DIMS), ("strides", C.c_int64 * MAX_DIMS),
                ("device_type", C.c_int32), ("device_index", C.c_int32)]


class WriteArgs(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("layout", C.c_uint32), ("scale_mode", C.c_uint32),
                ("flags", C.c_uint32), ("outer_scale", C.c_float), ("writer_policy", C.c_uint32),
                ("kv_c", Tensor), ("k_pe", Tensor), ("slot_mapping", Tensor), ("cache", Tensor),
                ("capture_max_abs", C.c_void_p), ("nonfinite_count", C.c_void_p), ("stream", C.c_void_p),
                ("reserved", C.c_uint64 * 4),
                ("out_of_range_count", C.c_void_p)]  # ABI 1.1, guarded by struct_size (issue 37)


class GatherArgs(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("layout", C.c_uint32), ("scale_mode", C.c_uint32),
                ("flags", C.c_uint32), ("outer_scale", C.c_float), ("reserved0", C.c_uint32),
                ("cache", Tensor), ("slots", Tensor), ("out", Tensor), ("stream", C.c_void_p),
                ("reserved", C.c_uint64 * 4)]


class AttendArgs(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("layout", C.c_uint32), ("scale_mode", C.c_uint32),
                ("flags", C.c_uint32), ("outer_scale", C.c_float), ("sm_scale", C.c_float),
                ("q", Tensor), ("slots", Tensor), ("valid_len", Tensor), ("cache", Tensor), ("out", Tensor),
                ("lse", Tensor), ("workspace", Tensor), ("stream", C.c_void_p), ("reserved", C.c_uint64 * 4)]


class MergeArgs(C.Structure):  # ABI 1.1
    _fields_ = [("struct_size", C.c_uint32), ("flags", C.c_uint32), ("partial_out", Tensor),
                ("partial_lse", Tensor), ("out", Tensor), ("lse", Tensor), ("stream", C.c_void_p),
                ("reserved", C.c_uint64 * 4)]


LOG_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_int32, C.c_char_p)


class HostDesc(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("reserved0", C.c_uint32), ("host_name", C.c_char_p),
                ("log", LOG_FN), ("log_user_data", C.c_void_p)]


class InitArgs(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("device_type", C.c_int32), ("device_index", C.c_int32),
                ("flags", C.c_uint32), ("host", C.POINTER(HostDesc)), ("reserved", C.c_uint64 * 4),
                ("environ", C.POINTER(C.c_char_p))]  # ABI 1.1


class ContextInfo(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("device_type", C.c_int32), ("device_index", C.c_int32),
                ("reserved0", C.c_uint32), ("capability_bits", C.c_uint64), ("device_name", C.c_char_p),
                ("backend_note", C.c_char_p)]


class ConfigRequest(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("flags", C.c_uint32), ("cache_dtype", C.c_char_p),
                ("model_dir", C.c_char_p), ("environ", C.POINTER(C.c_char_p)), ("host", C.POINTER(HostDesc)),
                ("reserved", C.c_uint64 * 4)]


class ConfigInfo(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("is_nvfp4", C.c_uint32), ("layout", C.c_uint32),
                ("scale_mode", C.c_uint32), ("scale_source", C.c_uint32), ("num_layers", C.c_uint32),
                ("identity", C.c_char_p), ("scale_source_path", C.c_char_p),
                ("writer_policy", C.c_uint32), ("reserved1", C.c_uint32)]  # ABI 1.1


STATUS = C.c_int32
_ctx = C.c_void_p
_cfg = C.c_void_p


class Plugin(C.Structure):
    """The plugin table (nvfp4_mla_plugin_t)."""
    _fields_ = [
        ("header", Header),
        ("plugin_name", C.c_char_p), ("version", C.c_char_p), ("git_revision", C.c_char_p),
        ("cuda_archs", C.c_char_p), ("record_format", C.c_char_p),
        ("capability_bits", C.c_uint64), ("capability_count", C.c_uint32), ("reserved0", C.c_uint32),
        ("capabilities", C.POINTER(Capability)),
        ("status_string", C.CFUNCTYPE(C.c_char_p, STATUS)),
        ("last_error", C.CFUNCTYPE(C.c_char_p)),
        ("init", C.CFUNCTYPE(STATUS, C.POINTER(InitArgs), C.POINTER(_ctx))),
        ("shutdown", C.CFUNCTYPE(STATUS, _ctx)),
        ("context_info", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(ContextInfo))),
        ("config_create", C.CFUNCTYPE(STATUS, C.POINTER(ConfigRequest), C.POINTER(_cfg))),
        ("config_info", C.CFUNCTYPE(STATUS, _cfg, C.POINTER(ConfigInfo))),
        ("config_layer_scale", C.CFUNCTYPE(STATUS, _cfg, C.c_uint32, C.POINTER(C.c_float))),
        ("config_destroy", C.CFUNCTYPE(None, _cfg)),
        ("write", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(WriteArgs))),
        ("gather", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(GatherArgs))),
        ("attend_workspace_bytes", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(AttendArgs), C.POINTER(C.c_uint64))),
        ("attend", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(AttendArgs))),
        ("merge", C.CFUNCTYPE(STATUS, _ctx, C.POINTER(MergeArgs))),  # ABI 1.1: guarded by table_has
    ]


# Members from config_create on are guarded by the table's struct_size (NVFP4_MLA_TABLE_MIN_SIZE).
TABLE_MIN_SIZE = Plugin.config_create.offset


def table_has(table, member):
    field = getattr(Plugin, member)
    return table.header.struct_size >= field.offset + field.size
