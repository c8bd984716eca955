"""A digest of the device code (issue 57): what a results file was measured on, computed from the
files themselves so that the GPU machine (a copy of the working tree, possibly without .git) and
this machine get the same value for the same code.

What it covers (SCOPE): every file under kernels/ (the CUDA kernels, their launchers, the plan that
picks a kernel and its CPU twins, kernels/meson.build with the CUDA flags) and the build files that
set the rest of them: the options files, and the top meson.build up to the end of its CUDA block
(project defaults, architectures, gencode; what follows it, subdirs and install rules, is not device
code: a new install rule leaves the figures current). Host code outside kernels/ (plugin/, host_shims/)
is not in it: a change there leaves the kernels' figures valid (hot_path.json's host times are the
exception a reader must keep in mind; its rows name the plugin revision too).

The digest is SHA-256 over the sorted list of (path relative to the root, SHA-256 of the bytes):
independent of timestamps, of git and of the order the filesystem lists files in. A moved file
changes it (the path is part of it): a moved kernel is a new build to measure.

    python3 bench/device_code.py                 print the tree's digest (12 hex) and what it covers
    python3 bench/device_code.py --long          the full 64 hex digits
    python3 bench/device_code.py --files         every file and its hash (to diff two trees)
    python3 bench/device_code.py --stamp F.json  add {"provenance": {"device_code": ...}} to a results
                                                 file that lacks it (nvfp4-mla-bench's, from C; .ci/gpu
                                                 stamps right after the run, on the tree it built)
    python3 bench/device_code.py --equivalent REV --evidence TEXT
                                                 record that git REV's device code compiles to the same
                                                 kernels as the tree's (EQUIVALENCE below): a row of
                                                 results/device_code_equivalence.tsv
    python3 bench/device_code.py --reconstruct F.json
                                                 for a file measured before issue 57: the digest of the
                                                 commit its plugin reports (git archive of that revision;
                                                 refused for a "-modified" or "unknown" build, whose code
                                                 git cannot give back), marked as reconstructed
EQUIVALENCE: a digest is of sources, so a pure move (a rename, a helper extracted, a comment) makes
every results file STALE although no kernel changed. results/device_code_equivalence.tsv records such
moves: `measured<TAB>same_as<TAB>evidence`, two full digests and the proof that the first's kernels
are the second's byte for byte (tools/kernel-text-compare's verdict over every architecture, with its
command). A results file is current when its digest is the tree's or reaches the tree's through those
rows; the captions then say so. A row is a claim checked by its evidence, not by this script: write one
only with a verdict of identical machine code.

Standard library only.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCOPE_DIRS = ("kernels",)
SCOPE_FILES = ("meson.build", "meson.options", "meson_options.txt")
# Never part of the code: editor and interpreter leftovers a copy of the tree may or may not carry.
_SKIP_SUFFIXES = (".pyc", "~", ".orig", ".rej", ".swp")
_SKIP_DIRS = ("__pycache__",)
SHORT = 12
EQUIVALENCE = os.path.join("results", "device_code_equivalence.tsv")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def files(root=ROOT):
    """[(relative path, sha256 hex)] of every file in scope, sorted by path (POSIX separators)."""
    out = []
    for name in SCOPE_FILES:
        path = os.path.join(root, name)
        if os.path.isfile(path):
            out.append((name, _sha256(path, _through_cuda_block if name == "meson.build" else lambda d: d)))
    for top in SCOPE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            for f in filenames:
                if f.startswith(".") or f.endswith(_SKIP_SUFFIXES):
                    continue
                path = os.path.join(dirpath, f)
                if os.path.isfile(path):
                    out.append((os.path.relpath(path, root).replace(os.sep, "/"), _sha256(path)))
    return sorted(out)


def _sha256(path, cut=lambda data: data):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        data = f.read()
    h.update(cut(data))
    return h.hexdigest()


def _through_cuda_block(data):
    """The top meson.build up to the `endif` that closes the block opened after `have_cuda = `; the
    whole file when those lines are not there (a rewritten file: then all of it counts)."""
    lines = data.split(b"\n")
    start = next((i for i, l in enumerate(lines) if l.startswith(b"have_cuda = ")), None)
    if start is None:
        return data
    end = next((i for i in range(start, len(lines)) if lines[i] == b"endif"), None)
    return data if end is None else b"\n".join(lines[:end + 1])


def digest(root=ROOT):
    """The full hex digest of the device code under root."""
    return record(root)["digest"]


def short(d):
    return d[:SHORT] if d else d


def record(root=ROOT):
    """What a results file's provenance keeps under "device_code"."""
    fl = files(root)
    h = hashlib.sha256()
    for rel, sha in fl:
        h.update(f"{rel}\0{sha}\n".encode())
    return {"digest": h.hexdigest(), "files": len(fl),
            "scope": "kernels/, meson.build through its CUDA block, meson.options, meson_options.txt",
            "how": "bench/device_code.py: sha256 over sorted (path, sha256 of the file)"}


def of_results(data):
    """The digest a results file records (full hex), or None when it records none."""
    prov = data.get("provenance") if isinstance(data, dict) else None
    dc = prov.get("device_code") if isinstance(prov, dict) else None
    d = dc.get("digest") if isinstance(dc, dict) else None
    return d if isinstance(d, str) and d else None


def equivalences(root=ROOT):
    """[(measured, same_as, evidence)] of results/device_code_equivalence.tsv ([] without the file);
    a malformed row stops with the file, line and what is wrong."""
    path = os.path.join(root, EQUIVALENCE)
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 3 or not all(_HEX64.fullmatch(c) for c in cols[:2]) or not cols[2].strip():
                raise SystemExit(f"{EQUIVALENCE}:{n}: expected measured<TAB>same_as<TAB>evidence, two 64-hex "
                                 f"digests and a non-empty evidence: {line[:80]!r}")
            rows.append((cols[0], cols[1], cols[2].strip()))
    return rows


def current(root=ROOT):
    """{digest: None for the tree's own, else the evidence of the row that links it} of every digest
    whose figures describe the tree's kernels: the tree's and those the equivalence rows chain to it."""
    out = {digest(root): None}
    rows = equivalences(root)
    grew = True
    while grew:
        grew = False
        for measured, same_as, evidence in rows:
            if same_as in out and measured not in out:
                out[measured] = evidence
                grew = True
    return out


def record_equivalence(rev, evidence, root=ROOT):
    """Appends `digest of git REV<TAB>the tree's<TAB>evidence`. 0, or 1 with a message."""
    try:
        old = digest_of_rev(rev, root)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    here = digest(root)
    if old == here:
        print(f"{rev}: its device code is the tree's ({short(here)}): nothing to record")
        return 0
    if not evidence.strip() or "\t" in evidence or "\n" in evidence:
        print("--evidence: one line of text without tabs (the verdict and its command)", file=sys.stderr)
        return 1
    path = os.path.join(root, EQUIVALENCE)
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("# measured\tsame_as\tevidence (bench/device_code.py, EQUIVALENCE: machine code identical)\n")
        f.write(f"{old}\t{here}\t{evidence.strip()}\n")
    print(f"{EQUIVALENCE}: {short(old)} ({rev}) = {short(here)} (the tree's)")
    return 0


def stamp(path, root=ROOT):
    """Adds the tree's device_code to a results file's provenance; refuses a file that records
    another digest (it was measured on other code) and says so. Returns 0, or 1 with a message."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not isinstance(data.get("provenance"), dict):
        print(f"{path}: no \"provenance\" object to stamp", file=sys.stderr)
        return 1
    rec = record(root)
    have = of_results(data)
    if have and have != rec["digest"]:
        print(f"{path}: records device code {short(have)}, the tree is {short(rec['digest'])}: not stamped",
              file=sys.stderr)
        return 1
    _write(path, rec)
    print(f"{path}: device code {short(rec['digest'])}")
    return 0


def _write(path, rec):
    """Puts "device_code": rec first in the file's provenance object, the rest of the text as it
    was (a C writer's floats and layout untouched: the diff is the one key)."""
    with open(path) as f:
        text = f.read()
    m = re.search(r'"provenance"\s*:\s*\{', text)
    new = text[:m.end()] + '"device_code": ' + json.dumps(rec) + ("," if text[m.end():].lstrip()[:1] != "}" else "") \
        + text[m.end():]
    if json.loads(new)["provenance"].get("device_code") != rec:
        raise SystemExit(f"{path}: the stamp did not land in the provenance object")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(new)
    os.replace(tmp, path)


def reconstruct(path, root=ROOT):
    """The device code of a results file written before the digest existed, from git: the revision
    its plugin reported, when that build was of a clean commit. 0, or 1 with a message."""
    with open(path) as f:
        data = json.load(f)
    prov = data.get("provenance") if isinstance(data, dict) else None
    rev = ((prov or {}).get("plugin") or {}).get("git_revision")
    if of_results(data):
        print(f"{path}: records device code {short(of_results(data))} already")
        return 0
    if not rev or rev == "unknown" or rev.endswith("-modified"):
        print(f"{path}: plugin revision {rev!r}: not a clean commit, its code cannot be read back", file=sys.stderr)
        return 1
    try:
        rec = record_of_rev(rev, root)
    except RuntimeError as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    rec["reconstructed_from"] = f"git {rev} (the plugin's clean revision; digest of that commit's files)"
    _write(path, rec)
    print(f"{path}: device code {short(rec['digest'])} (reconstructed from git {rev})")
    return 0


def record_of_rev(rev, root=ROOT):
    """record() of git revision REV's files in scope (git archive); RuntimeError naming the revision."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", root, "archive", "--format=tar", rev, "--", *SCOPE_DIRS]
                                 + [f for f in SCOPE_FILES if _in_rev(root, rev, f)], capture_output=True)
        if archive.returncode != 0:
            raise RuntimeError(f"git archive {rev}: {archive.stderr.decode().strip()}")
        tar_path = os.path.join(tmp, "code.tar")
        with open(tar_path, "wb") as f:
            f.write(archive.stdout)
        with tarfile.open(tar_path) as t:
            t.extractall(os.path.join(tmp, "tree"))
        return record(os.path.join(tmp, "tree"))


def digest_of_rev(rev, root=ROOT):
    return record_of_rev(rev, root)["digest"]


def _in_rev(root, rev, name):
    return subprocess.run(["git", "-C", root, "cat-file", "-e", f"{rev}:{name}"], capture_output=True).returncode == 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--files", action="store_true")
    ap.add_argument("--stamp", nargs="+", metavar="FILE")
    ap.add_argument("--reconstruct", nargs="+", metavar="FILE")
    ap.add_argument("--equivalent", metavar="REV", help="record REV's device code as the tree's (needs --evidence)")
    ap.add_argument("--evidence", default="", help="the verdict that proves it, with its command (one line)")
    args = ap.parse_args(argv)
    if args.equivalent:
        return record_equivalence(args.equivalent, args.evidence, args.root)
    if args.stamp:
        return max(stamp(p, args.root) for p in args.stamp)
    if args.reconstruct:
        return max(reconstruct(p, args.root) for p in args.reconstruct)
    if args.files:
        for rel, sha in files(args.root):
            print(f"{sha}  {rel}")
        return 0
    rec = record(args.root)
    print(rec["digest"] if args.long else short(rec["digest"]), f"({rec['files']} files: {rec['scope']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
