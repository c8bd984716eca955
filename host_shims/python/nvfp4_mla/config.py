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
from .context import snapshot
from .errors import ConfigError, check, member
from . import settings
from .settings import SettingError

# The variables' names, from the settings table's mirror (settings.py).
DYNAMIC_SCALE_ENV = settings.DYNAMIC_SCALE.name
SCALES_FILE_ENV = settings.SCALES_FILE.name
FP8_ROPE_ENV = settings.FP8_ROPE.name
WRITER_POLICY_ENV = settings.WRITER_POLICY.name
DEFAULT_IDENTITY = "vllm-default-v1"


class PluginConfig:
    """An immutable configuration object of the plugin (owned; released by close)."""

    def __init__(self, plugin, handle):
        self._plugin = plugin
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
        value = C.c_float()
        check(self._plugin, member(self._plugin, "config_layer_scale")(self._handle, layer, C.byref(value)),
              "config_layer_scale")
        return value.value

    def close(self):
        if self._handle:
            member(self._plugin, "config_destroy")(self._handle)
            self._handle = None

    __del__ = close


@dataclass(frozen=True)
class CacheFormat:
    dynamic_scale: bool = False
    fp8_rope: bool = False
    scales_file: str = ""
    writer_policy: str = "rtn"  # a name of _abi.WRITER_POLICIES; pass PluginConfig.writer_policy to write

    @classmethod
    def from_env(cls, environ=None):
        """Raises ConfigError (status ERR_CONFIG) with the plugin's words for a value the rule
        does not understand; never reads it as off."""
        env = os.environ if environ is None else environ
        def read(row):
            return settings.parse(row, env.get(row.name))
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
        req = _abi.ConfigRequest(struct_size=C.sizeof(_abi.ConfigRequest), cache_dtype=str(cache_dtype).encode(),
                                 model_dir=model_dir.encode() if model_dir else None,
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
        cfg = self.open(plugin, cache_dtype, model_dir)
        try:
            if cfg.identity == DEFAULT_IDENTITY:
                return {}
            stride = block_stride_bytes or block_size * _abi.record_bytes(cfg.layout)
            return {"kv_cache_abi": cfg.identity, "worker_kv_bytes_per_block": num_layers * stride}
        finally:
            cfg.close()
