#!/usr/bin/env python3
"""Build step: writes a C header holding one file's bytes, so that the nvfp4-mla tool carries its
default magnitude profile and works from any folder and after `meson install`.

usage: embed_file.py INPUT OUTPUT
"""
import hashlib
import os
import sys


def main(src, dst):
    data = open(src, "rb").read()
    name = os.path.basename(src)
    lines = [f"/* Generated at build time by host_shims/cli/embed_file.py from {name}: do not edit.",
             f" * {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}. */",
             f'static const char cli_profile_name[] = "{name}";',
             f"static const size_t cli_profile_size = {len(data)};",
             "static const unsigned char cli_profile_bytes[] = {"]
    for i in range(0, len(data), 16):
        lines.append("    " + " ".join(f"0x{b:02x}," for b in data[i:i + 16]))
    lines.append("};")
    with open(dst, "w") as out:
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
