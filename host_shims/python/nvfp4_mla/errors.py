"""Plugin status codes as exceptions carrying the plugin's last-error text, and the checks of scalar
arguments, which raise TypeError (a type the argument cannot have) or ValueError (a value outside its
field) naming the argument before any ctypes field could wrap it (issue 48: layout=2**32+1 wrote
layout 1, a bool passed as 1)."""

import numbers
import operator

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


def show(value):
    """repr(value), cut for a message (10**400 has 401 digits)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(name, value, lo, hi, hint):
    """`value` as an int in [lo, hi]: a Python int or a NumPy integer (operator.index), never a bool,
    a float or a string."""
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not hasattr(type(value), "__index__"):
        raise TypeError(f"{name}={show(value)}: expected an integer, {hint}")
    index = operator.index(value)
    if not lo <= index <= hi:
        raise ValueError(f"{name}={show(value)}: out of range, must be in [{lo}, {hi}] ({hint})")
    return index


def number(name, value):
    """A float field's value: a real number (int, float, a NumPy scalar), never a bool or a string; one
    too large for any float (10**400) is refused here, the plugin checks the rest (a scale's range)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}={show(value)}: expected a number")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}={show(value)}: too large for a float") from None
