"""The settings of plugin/settings.h, table row for row and rule for rule, for the Python host.

SETTINGS mirrors the C table: every environment variable nvfp4-mla reads, its kind, the call that
reads it and what unset means. tests/test_layout.py compares it with the C table, and parse()
with the C parser over sample values (message for message), through the build's layout manifest.

boolean: unset or "" is off; "0"/"false" off and "1"/"true" on, in any case; anything else fails.
path:    unset or "" is none; leading or trailing whitespace fails. VLLM_NVFP4_MLA_SCALES_FILE, which the
         runtime it comes from reads as os.getenv(name, "").strip(), is taken stripped instead
         (parse_path_stripped; ASCII whitespace, as C's isspace), and empty after stripping is none.
choice:  unset or "" is the first name; one of the names in any case; anything else fails.
count:   unset or "" is the caller's default (None here); decimal digits within the row's bounds.
A failure names the variable and shows the value quoted byte by byte as the C code does (control,
quote, backslash and non-ASCII bytes escaped, cut after QUOTE_MAX bytes), so that a host in either
language prints the same line for the same mistake.
"""

import os
from dataclasses import dataclass

from . import _abi

QUOTE_MAX = 100  # NVFP4_SETTING_QUOTE_MAX
_SPACE = " \t\n\v\f\r"  # C's isspace() in the "C" locale, not str.isspace()


class SettingError(ValueError):
    """A setting's value is not understood; str() is the C rule's message."""


def quote(value):
    """The value between double quotes, escaped as nvfp4_setting_quote() does."""
    raw = os.fsencode(value) if isinstance(value, str) else bytes(value)
    out = ['"']
    for c in raw[:QUOTE_MAX]:
        if c in (0x22, 0x5C):
            out.append("\\" + chr(c))
        elif c in (0x09, 0x0A, 0x0D):
            out.append({0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}[c])
        elif c < 0x20 or c >= 0x7F:
            out.append(f"\\x{c:02x}")
        else:
            out.append(chr(c))
    out.append('"...' if len(raw) > QUOTE_MAX else '"')
    return "".join(out)


def parse_bool(name, value):
    """True or False by the rule; raises SettingError naming `name` and the quoted value."""
    word = value.lower() if value and value.isascii() else value  # C's strcasecmp: ASCII only
    if not value or word in ("0", "false"):
        return False
    if word in ("1", "true"):
        return True
    raise SettingError(f"{name}={quote(value)} is not a boolean: use 1 or true for on, 0 or false for off "
                       "(any case); unset or empty is off")


def parse_path(name, value):
    """The path exactly as given ("" = none); raises SettingError on surrounding whitespace."""
    if not value:
        return ""
    if value[0] in _SPACE or value[-1] in _SPACE:
        raise SettingError(f"{name}={quote(value)} has leading or trailing whitespace: give the path without it; "
                           "unset or empty means none")
    return value


def parse_path_stripped(name, value):
    """The path without surrounding ASCII whitespace ("" = none), as nvfp4_setting_path_stripped()."""
    return (value or "").strip(_SPACE)


def parse_choice(name, value, names):
    """The name `value` picks (names[0] for unset or ""), as nvfp4_setting_choice(); raises
    SettingError naming `name`, the quoted value and every accepted name."""
    if not value:
        return names[0]
    word = value.lower() if value.isascii() else value  # C's strcasecmp: ASCII only
    for candidate in names:
        if word == candidate.lower():
            return candidate
    raise SettingError(f"{name}={quote(value)} is not one of: {', '.join(names)} (any case); "
                       f"unset or empty is {names[0]}")


def parse_count(name, value, what, lo, hi, none):
    """The decimal count `value` in [lo, hi] (None for unset or ""), as nvfp4_setting_count()."""
    if not value:
        return None
    if value.isascii() and value.isdigit() and lo <= int(value) <= hi:
        return int(value)
    raise SettingError(f"{name}={quote(value)} is not {what} in [{lo}, {hi}]; unset or empty is {none}")


@dataclass(frozen=True)
class Setting:
    """One row of the table (nvfp4_setting_t)."""
    name: str
    kind: str  # "bool", "path", "path_stripped", "choice", "count"
    reader: str  # who reads it: "config_create", "init" (CUDA contexts), "loader" (hosts) or "vllm_plugin"
    unset: str  # what unset or "" means, in the messages' words
    choices: tuple = ()  # choice: the names, the first the default
    what: str = ""  # count: what the number is
    lo: int = 0  # count: the accepted range
    hi: int = 0


DYNAMIC_SCALE = Setting("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "bool", "config_create", "off")
FP8_ROPE = Setting("KV_FP8_ROPE", "bool", "config_create", "off")
SCALES_FILE = Setting("VLLM_NVFP4_MLA_SCALES_FILE", "path_stripped", "config_create", "none")
WRITER_POLICY = Setting("NVFP4_MLA_WRITER_POLICY", "choice", "config_create", "rtn", tuple(_abi.WRITER_POLICIES))
ATTEND_SMEM_CAP = Setting("NVFP4_MLA_ATTEND_SMEM_CAP", "count", "init", "no cap", what="a decimal byte count",
                          lo=16384, hi=2**31 - 1)
ATTEND_MMA = Setting("NVFP4_MLA_ATTEND_MMA", "choice", "init", "auto", ("auto", "sync"))
ATTEND_MERGE = Setting("NVFP4_MLA_ATTEND_MERGE", "choice", "init", "auto", ("auto", "separate", "in-launch"))
ATTEND_GRAPHS = Setting("NVFP4_MLA_ATTEND_GRAPHS", "choice", "init", "auto", ("auto", "off"))
PLUGIN = Setting(_abi.PLUGIN_ENV, "path", "loader", "no plugin selected")
# The vLLM plugin's opt-in to static scale 1.0 on every layer when nothing calibrates the cache
# (vllm_plugin/serving.py); no C code reads it, the row keeps it under the one rule.
UNCALIBRATED = Setting("NVFP4_MLA_UNCALIBRATED", "bool", "vllm_plugin", "off")

# In the C table's order (nvfp4_setting_id_t).
SETTINGS = (DYNAMIC_SCALE, FP8_ROPE, SCALES_FILE, WRITER_POLICY, ATTEND_SMEM_CAP, ATTEND_MMA, ATTEND_MERGE, ATTEND_GRAPHS,
            PLUGIN, UNCALIBRATED)


def parse(setting, value):
    """`value` (None: unset) by the row's rule, as nvfp4_setting_parse(): a bool, a path ("" for
    none), a choice's name, or a count (None for unset); raises SettingError with the C message."""
    if setting.kind == "bool":
        return parse_bool(setting.name, value)
    if setting.kind == "path":
        return parse_path(setting.name, value)
    if setting.kind == "path_stripped":
        return parse_path_stripped(setting.name, value)
    if setting.kind == "choice":
        return parse_choice(setting.name, value, setting.choices)
    if setting.kind == "count":
        return parse_count(setting.name, value, setting.what, setting.lo, setting.hi, setting.unset)
    raise ValueError(f"{setting.name}: unknown setting kind {setting.kind!r}")
