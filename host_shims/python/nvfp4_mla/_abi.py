"""ctypes mirrors of the ABI 1 headers (abi/nvfp4_mla*.h).

Every size and member offset here is checked against the C compiler's by tests/test_layout.py,
which reads the layout manifest the build emits (host_shims/python/layout_manifest.c). Change
the header and this file together, and only as abi/CHANGELOG.md allows.
"""

import ctypes as C

ABI_MAJOR = 1
ABI_MINOR = 0
ABI_MAGIC = 0x4D34464E
ENTRY_SYMBOL = "nvfp4_mla_plugin_v1"
PLUGIN_ENV = "NVFP4_MLA_PLUGIN"
PLUGIN_FILE = "libnvfp4_mla.so"

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

LAYOUT_FP8_ROPE_368 = 1
LAYOUT_BF16_ROPE_432 = 2
LAYOUT_FP8_DS_MLA_656 = 3  # the 656-byte fp8_ds_mla record (attend only: the baseline readers)
RECORD_BYTES = {LAYOUT_FP8_ROPE_368: 368, LAYOUT_BF16_ROPE_432: 432, LAYOUT_FP8_DS_MLA_656: 656}
SCALE_STATIC = 1
SCALE_PER_TOKEN = 2

DTYPE_U8, DTYPE_I32, DTYPE_I64, DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 1, 2, 3, 4, 5, 6
DTYPE_NAMES = {DTYPE_U8: "u8", DTYPE_I32: "i32", DTYPE_I64: "i64", DTYPE_F32: "f32", DTYPE_BF16: "bf16",
               DTYPE_F16: "f16"}
DEVICE_CPU = 1
DEVICE_CUDA = 2

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 1, 2, 3, 4

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
]
CAP = {name: bit for name, bit in CAPABILITIES}


def cap_name(bit):
    for name, b in CAPABILITIES:
        if b == bit:
            return name
    return "unknown"


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
                ("flags", C.c_uint32), ("outer_scale", C.c_float), ("reserved0", C.c_uint32),
                ("kv_c", Tensor), ("k_pe", Tensor), ("slot_mapping", Tensor), ("cache", Tensor),
                ("capture_max_abs", C.c_void_p), ("nonfinite_count", C.c_void_p), ("stream", C.c_void_p),
                ("reserved", C.c_uint64 * 4)]


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


LOG_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_int32, C.c_char_p)


class HostDesc(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("reserved0", C.c_uint32), ("host_name", C.c_char_p),
                ("log", LOG_FN), ("log_user_data", C.c_void_p)]


class InitArgs(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("device_type", C.c_int32), ("device_index", C.c_int32),
                ("flags", C.c_uint32), ("host", C.POINTER(HostDesc)), ("reserved", C.c_uint64 * 4)]


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
                ("identity", C.c_char_p), ("scale_source_path", C.c_char_p)]


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
    ]


# Members from config_create on are guarded by the table's struct_size (NVFP4_MLA_TABLE_MIN_SIZE).
TABLE_MIN_SIZE = Plugin.config_create.offset


def table_has(table, member):
    field = getattr(Plugin, member)
    return table.header.struct_size >= field.offset + field.size
