"""The settings rule of plugin/settings.h, rule for rule and word for word, for the Python host.

boolean: unset or "" is off; "0"/"false" off and "1"/"true" on, in any case; anything else fails.
path:    unset or "" is none; leading or trailing whitespace fails. VLLM_NVFP4_MLA_SCALES_FILE, which the
         runtime it comes from reads as os.getenv(name, "").strip(), is taken stripped instead
         (parse_path_stripped; ASCII whitespace, as C's isspace), and empty after stripping is none.
choice:  unset or "" is the first name; one of the names in any case; anything else fails.
A failure names the variable and shows the value quoted byte by byte as the C code does (control,
quote, backslash and non-ASCII bytes escaped, cut after QUOTE_MAX bytes), so that a host in either
language prints the same line for the same mistake.
"""

import os

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
