#!/usr/bin/env python3
"""Records a plugin file's SHA-256 beside it, in sha256sum's format ("<64 hex digits>  <name>"), for
the loaders' check before dlopen (host_shims/loader/nvfp4_mla_loader.c, check_digest; Python:
nvfp4_mla/loader.py): a plugin damaged after this point is refused instead of crashing its host.

    record_digest.py FILE OUT         at build time: FILE's digest into OUT
    record_digest.py --installed REL  as a meson install script: the installed file
                                      $MESON_INSTALL_DESTDIR_PREFIX/REL, after meson has installed
                                      (and possibly stripped or rewritten) it, into REL.sha256
"""
import hashlib
import os
import sys


def record(path, out):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{digest.hexdigest()}  {os.path.basename(path)}\n")
    os.replace(tmp, out)


def main(argv):
    if len(argv) == 3 and argv[1] == "--installed":
        rel = argv[2]  # relative to the prefix, or absolute (an absolute libdir): then under DESTDIR
        path = (os.environ.get("DESTDIR", "") + rel if os.path.isabs(rel)
                else os.path.join(os.environ["MESON_INSTALL_DESTDIR_PREFIX"], rel))
        record(path, path + ".sha256")
        if not os.environ.get("MESON_INSTALL_QUIET"):
            print(f"Recording the plugin's digest in {path}.sha256")
        return 0
    if len(argv) == 3:
        record(argv[1], argv[2])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
