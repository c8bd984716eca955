"""Finding, loading and checking the plugin: the C loader's decisions and words, in Python.

Selection is NVFP4_MLA_PLUGIN (a path to the .so, or a folder holding libnvfp4_mla.so; "none"
disables). The header (magic, ABI major, minimum table size) is checked before anything else is
read. `require` refuses a configuration the plugin cannot serve, naming the plugin path, both ABI
versions and every missing capability, in the same words as host_shims/loader/nvfp4_mla_loader.c
(tests/test_loader_matrix.py checks the words against the same mock plugins).
"""

import ctypes as C
import os

from . import _abi


class PluginError(RuntimeError):
    """The plugin could not be loaded, or refused a request."""


class PluginDisabled(PluginError):
    """NVFP4_MLA_PLUGIN=none."""


class PluginNotSelected(PluginError):
    """NVFP4_MLA_PLUGIN is unset or empty."""


HOST_ABI = f"{_abi.ABI_MAJOR}.{_abi.ABI_MINOR}"


def _resolve(selection):
    if os.path.isdir(selection):
        return os.path.join(selection, _abi.PLUGIN_FILE)
    return selection


class LoadedPlugin:
    """A dlopen()ed plugin whose header passed the checks; `table` is its nvfp4_mla_plugin_t."""

    def __init__(self, path, lib, table):
        self.path = path
        self._lib = lib  # keeps the library loaded while the table is used
        self.table = table

    @property
    def abi(self):
        return f"{self.table.header.abi_major}.{self.table.header.abi_minor}"

    def capability_bits(self):
        """Compiled capabilities, minus operations the table is too short to hold (older minors)."""
        bits = self.table.capability_bits
        for member, cap in (("write", "op.write"), ("gather", "op.gather"), ("attend", "op.attend"),
                            ("config_destroy", "config.cache_identity")):
            if not _abi.table_has(self.table, member):
                bits &= ~_abi.CAP[cap]
        return bits

    def capabilities(self):
        """(name, revision) of every compiled capability the table lists, unknown names included."""
        caps = self.table.capabilities
        return [(caps[i].name.decode(), caps[i].revision) for i in range(self.table.capability_count)]


def load(selection=None):
    """Loads and checks the plugin; raises PluginDisabled, PluginNotSelected or PluginError."""
    if selection is None:
        selection = os.environ.get(_abi.PLUGIN_ENV)  # Python has no secure_getenv; see README
    if not selection:
        raise PluginNotSelected(
            f"no nvfp4-mla plugin selected (set {_abi.PLUGIN_ENV} to the plugin file or its folder)")
    if selection == "none":
        raise PluginDisabled(f"nvfp4-mla plugin disabled ({_abi.PLUGIN_ENV}=none)")
    path = _resolve(selection)
    try:
        lib = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        raise PluginError(f"cannot load nvfp4-mla plugin {path}: {exc}") from None
    try:
        entry = getattr(lib, _abi.ENTRY_SYMBOL)
    except AttributeError:
        other = hasattr(lib, "nvfp4_mla_plugin_v2")
        tail = ("; it implements ABI major 2 only: upgrade the host" if other
                else "; it is not an nvfp4-mla plugin")
        raise PluginError(f"nvfp4-mla plugin {path} does not export {_abi.ENTRY_SYMBOL} "
                          f"(host ABI {HOST_ABI}){tail}") from None
    entry.restype = C.POINTER(_abi.Header)
    entry.argtypes = []
    header_ptr = entry()
    refusal, detail = None, ""
    if not header_ptr:
        refusal = "its entry returned no table"
    else:
        h = header_ptr.contents
        if h.magic != _abi.ABI_MAGIC:
            refusal, detail = "wrong magic", f" (0x{h.magic:08x}, expected 0x{_abi.ABI_MAGIC:08x})"
        elif h.abi_major != _abi.ABI_MAJOR:
            refusal = "ABI major mismatch"
            detail = f" (plugin ABI {h.abi_major}.{h.abi_minor}, host ABI {HOST_ABI})"
        elif h.struct_size < _abi.TABLE_MIN_SIZE:
            refusal = "table too small"
            detail = (f" (struct_size {h.struct_size} < {_abi.TABLE_MIN_SIZE}; plugin ABI "
                      f"{h.abi_major}.{h.abi_minor}, host ABI {HOST_ABI})")
    if refusal:
        raise PluginError(f"nvfp4-mla plugin {path} refused: {refusal}{detail}")
    table = C.cast(header_ptr, C.POINTER(_abi.Plugin)).contents
    return LoadedPlugin(path, lib, table)


def requirement_bits(layout, scale_mode, extra=0):
    """The capability bits a cache configuration needs (as nvfp4_mla_requirement_caps)."""
    need = _abi.CAP["op.write"] | _abi.CAP["op.gather"] | extra
    need |= _abi.CAP["layout.fp8_rope_368"] if layout == _abi.LAYOUT_FP8_ROPE_368 else _abi.CAP["layout.bf16_rope_432"]
    if scale_mode == _abi.SCALE_PER_TOKEN:
        need |= _abi.CAP["write.per_token_scale"] | _abi.CAP["read.latent_scale_per_token"]
    else:
        need |= _abi.CAP["scale.static_outer"]
    return need


def require(plugin, layout, scale_mode, available=None, extra=0, user_requested=True):
    """Accepts (returns the acceptance line) or raises PluginError naming what is missing."""
    available = plugin.capability_bits() if available is None else available
    missing = requirement_bits(layout, scale_mode, extra) & ~available
    mode = "per-token" if scale_mode == _abi.SCALE_PER_TOKEN else "static"
    lay = "fp8_rope_368" if layout == _abi.LAYOUT_FP8_ROPE_368 else "bf16_rope_432"
    head = f"nvfp4-mla plugin {plugin.path} (ABI {plugin.abi}, host ABI {HOST_ABI})"
    if not missing:
        return f"{head} serves {mode} scales on {lay}"
    names = ", ".join(_abi.cap_name(1 << b) for b in range(64) if missing & (1 << b))
    asked = " (requested by the configuration)" if user_requested else ""
    raise PluginError(f"{head} cannot serve {mode} scales on {lay}{asked}: missing {names}")
