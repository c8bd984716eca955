"""The cache format of one server process, and the identity its persistent caches use.

`CacheFormat.from_env()` snapshots the variables deployments set (VLLM_NVFP4_MLA_DYNAMIC_SCALE,
VLLM_NVFP4_MLA_SCALES_FILE, KV_FP8_ROPE, and NVFP4_MLA_WRITER_POLICY) into an immutable value,
by the plugin's own settings rule (settings.py: a value it does not understand is a ConfigError);
everything else is asked of the plugin (its config_create), never reimplemented here, so every host
computes the same decision and the same identity string.
"""

import ctypes as C
import os
from dataclasses import dataclass

from . import _abi
from .context import path_bytes, snapshot
from .errors import ConfigError, check, integer, member
from . import settings
from .settings import SettingError

# The variables' names, from the settings table's mirror (settings.py).
DYNAMIC_SCALE_ENV = settings.DYNAMIC_SCALE.name
SCALES_FILE_ENV = settings.SCALES_FILE.name
FP8_ROPE_ENV = settings.FP8_ROPE.name
WRITER_POLICY_ENV = settings.WRITER_POLICY.name
DEFAULT_IDENTITY = "vllm-default-v1"


def _dtype_name(cache_dtype):
    """A cache dtype's name as config_create takes it: a str ("nvfp4_ds_mla", "auto", ...) or a torch.dtype
    (its str, "torch.bfloat16"); None, which str() made "None" (a dtype that does not use the plugin),
    and other objects are refused."""
    if isinstance(cache_dtype, str) or type(cache_dtype).__module__ == "torch":
        name = str(cache_dtype)
        if "\0" not in name:
            return name.encode()
    raise TypeError(f"cache_dtype={cache_dtype!r}: expected a cache dtype's name (a str such as \"nvfp4_ds_mla\") or "
                    "a torch.dtype")


class PluginConfig:
    """An immutable configuration object of the plugin (owned; released by close)."""

    def __init__(self, plugin, handle):
        self._plugin = plugin
        # Read now: close() may run at interpreter exit (__del__), once the modules' names are None, so it
        # calls only what this object holds (bad-inputs-4 N17: errors.member was None there).
        self._destroy = member(plugin, "config_destroy")
        self._handle = handle
        info = _abi.ConfigInfo(struct_size=C.sizeof(_abi.ConfigInfo))
        check(plugin, member(plugin, "config_info")(handle, C.byref(info)), "config_info")
        self.is_nvfp4 = bool(info.is_nvfp4)
        self.layout = info.layout
        self.scale_mode = info.scale_mode
        self.scale_source = info.scale_source
        self.num_layers = info.num_layers
        self.identity = info.identity.decode()
        self.scale_source_path = info.scale_source_path.decode()
        # ABI 1.1: a plugin that filled less predates writer policies (its writer is rtn).
        self.has_writer_policy = info.struct_size >= C.sizeof(_abi.ConfigInfo)
        self.writer_policy = info.writer_policy if self.has_writer_policy else _abi.WRITER_POLICY_RTN

    def layer_scale(self, layer):
        """Layer `layer`'s static outer scale (an int 0..2^32-1: a negative one wrapped to a layer past the
        calibration and read 1.0)."""
        layer = integer("layer", layer, 0, 2**32 - 1, "a layer index")
        value = C.c_float()
        check(self._plugin, member(self._plugin, "config_layer_scale")(self._live("layer_scale"), layer,
                                                                       C.byref(value)), "config_layer_scale")
        return value.value

    def _live(self, call):
        if not self._handle:
            raise ValueError(f"{call}: this PluginConfig is closed")
        return self._handle

    def close(self):
        """Releases the configuration; again it does nothing. Needs nothing but this object (see __init__)."""
        handle = getattr(self, "_handle", None)
        if handle:
            self._handle = None
            self._destroy(handle)

    __del__ = close


@dataclass(frozen=True)
class CacheFormat:
    """The settings, typed: the flags are bools (a truthy "0" or "false" was taken as on), scales_file a
    path ("" for none), writer_policy a policy's name; anything else is refused by name at construction."""
    dynamic_scale: bool = False
    fp8_rope: bool = False
    scales_file: str = ""
    writer_policy: str = "rtn"  # a name of _abi.WRITER_POLICIES; pass PluginConfig.writer_policy to write

    def __post_init__(self):
        for name in ("dynamic_scale", "fp8_rope"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"CacheFormat: {name}={value!r}: expected True or False (CacheFormat.from_env() "
                                "reads the variables by the plugin's rule)")
        if not isinstance(self.scales_file, (str, os.PathLike)):
            raise TypeError(f"CacheFormat: scales_file={self.scales_file!r}: expected a path (str or os.PathLike), "
                            "\"\" for none")
        object.__setattr__(self, "scales_file", os.fsdecode(self.scales_file))
        policy = self.writer_policy.lower() if isinstance(self.writer_policy, str) and \
            self.writer_policy.isascii() else self.writer_policy  # any case, as NVFP4_MLA_WRITER_POLICY
        if not isinstance(policy, str) or policy not in _abi.WRITER_POLICIES:
            raise ValueError(f"CacheFormat: writer_policy={self.writer_policy!r}: expected one of "
                             f"{', '.join(_abi.WRITER_POLICIES)} (any case)")
        object.__setattr__(self, "writer_policy", policy)

    @classmethod
    def from_env(cls, environ=None):
        """Raises ConfigError (status ERR_CONFIG) with the plugin's words for a value the rule
        does not understand; never reads it as off. A value that is not a string (an environment holds
        only strings) is a TypeError naming the variable."""
        env = os.environ if environ is None else environ
        def read(row):
            value = env.get(row.name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"CacheFormat.from_env: {row.name}={value!r}: expected a str (as in os.environ) "
                                "or no entry")
            return settings.parse(row, value)
        try:
            return cls(dynamic_scale=read(settings.DYNAMIC_SCALE), fp8_rope=read(settings.FP8_ROPE),
                       scales_file=read(settings.SCALES_FILE), writer_policy=read(settings.WRITER_POLICY))
        except SettingError as exc:
            raise ConfigError(_abi.ERR_CONFIG, "CacheFormat.from_env", str(exc)) from None

    def environ(self):
        """The snapshot handed to the plugin instead of the process environment (name -> value)."""
        env = {DYNAMIC_SCALE_ENV: "1" if self.dynamic_scale else "0", FP8_ROPE_ENV: "1" if self.fp8_rope else "0"}
        if self.scales_file:
            env[SCALES_FILE_ENV] = self.scales_file
        if self.writer_policy != "rtn":  # unset is rtn, which every plugin (also a 1.0 one) writes
            env[WRITER_POLICY_ENV] = self.writer_policy
        return env

    def open(self, plugin, cache_dtype="nvfp4_ds_mla", model_dir=None, log=None):
        """The plugin's configuration for this format; raises the plugin's ConfigError/IOError."""
        env_array = snapshot(self.environ())  # borrowed by config_create for the call only
        host = None
        if log is not None:
            fn = _abi.LOG_FN(lambda _u, level, msg: log(level, msg.decode()))
            host = _abi.HostDesc(struct_size=C.sizeof(_abi.HostDesc), host_name=b"nvfp4_mla.py", log=fn)
        req = _abi.ConfigRequest(struct_size=C.sizeof(_abi.ConfigRequest), cache_dtype=_dtype_name(cache_dtype),
                                 model_dir=path_bytes("model_dir", model_dir or None),
                                 environ=C.cast(env_array, C.POINTER(C.c_char_p)),
                                 host=C.pointer(host) if host else None)
        handle = C.c_void_p()
        check(plugin, member(plugin, "config_create")(C.byref(req), C.byref(handle)), "config_create")
        return PluginConfig(plugin, handle)

    def validate(self, plugin, model_dir=None):
        """Raises if the plugin refuses this format (mutually exclusive modes, per-token on 432, ...)."""
        self.open(plugin, "nvfp4_ds_mla", model_dir).close()

    def record_abi(self, plugin, cache_dtype, model_dir=None):
        """The persistent-cache identity for `cache_dtype`, as the plugin computes it."""
        cfg = self.open(plugin, cache_dtype, model_dir)
        try:
            return cfg.identity
        finally:
            cfg.close()

    def offload_namespace(self, plugin, cache_dtype, block_size, num_layers, block_stride_bytes=None, model_dir=None):
        """The fields a persistent offload namespace adds for a non-default identity: the identity
        itself (kv_cache_abi) and the bytes one worker stores per block over all its layers
        (worker_kv_bytes_per_block = num_layers * block stride). Empty for vllm-default-v1, so
        existing namespaces stay unchanged."""
        block_size = integer("block_size", block_size, 1, 2**40, "tokens per block")
        num_layers = integer("num_layers", num_layers, 1, 2**32 - 1, "layers one worker holds")
        cfg = self.open(plugin, cache_dtype, model_dir)
        try:
            if cfg.identity == DEFAULT_IDENTITY:
                return {}
            packed = block_size * _abi.record_bytes(cfg.layout)
            stride = packed if block_stride_bytes is None else integer(
                "block_stride_bytes", block_stride_bytes, packed, 2**48, f"at least block_size x {packed // block_size}")
            return {"kv_cache_abi": cfg.identity, "worker_kv_bytes_per_block": num_layers * stride}
        finally:
            cfg.close()
