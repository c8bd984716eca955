"""Plugin status codes as exceptions carrying the plugin's last-error text."""

from . import _abi
from .loader import HOST_ABI, PluginError


class PluginCallError(PluginError):
    def __init__(self, status, call, message):
        super().__init__(f"{message} [{_STATUS_NAMES.get(status, status)}]")  # the plugin names the call
        self.status = status
        self.call = call
        self.plugin_message = message


class InvalidArgument(PluginCallError, ValueError):
    pass


class Unsupported(PluginCallError):
    pass


class ConfigError(PluginCallError):
    pass


class DeviceError(PluginCallError):
    pass


_STATUS_NAMES = {_abi.ERR_INVALID_ARGUMENT: "INVALID_ARGUMENT", _abi.ERR_UNSUPPORTED: "UNSUPPORTED",
                 _abi.ERR_OUT_OF_MEMORY: "OUT_OF_MEMORY", _abi.ERR_DEVICE: "DEVICE", _abi.ERR_IO: "IO",
                 _abi.ERR_CONFIG: "CONFIG", _abi.ERR_VERSION: "VERSION", _abi.ERR_INTERNAL: "INTERNAL"}
_CLASSES = {_abi.ERR_INVALID_ARGUMENT: InvalidArgument, _abi.ERR_VERSION: InvalidArgument,
            _abi.ERR_UNSUPPORTED: Unsupported, _abi.ERR_CONFIG: ConfigError, _abi.ERR_IO: ConfigError,
            _abi.ERR_DEVICE: DeviceError}


def check(plugin, status, call):
    """Raises the exception of a failed status, with the plugin's words (read on this thread)."""
    if status != _abi.OK:
        message = plugin.table.last_error().decode(errors="replace")
        raise _CLASSES.get(status, PluginCallError)(status, call, message)


def member(plugin, name):
    """The table member `name`, read only when the table's struct_size holds it (an older minor's
    table ends before its later members); Unsupported otherwise. The loader has already refused a
    table whose covered members include a NULL one."""
    if not _abi.table_has(plugin.table, name):
        raise Unsupported(_abi.ERR_UNSUPPORTED, name,
                          f"nvfp4-mla plugin {plugin.path} (ABI {plugin.abi}, host ABI {HOST_ABI}): its table "
                          f"({plugin.table.header.struct_size} bytes) has no {name} member")
    return getattr(plugin.table, name)
