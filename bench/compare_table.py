"""Every figure of BENCHMARKS.md and README.md, and results/PROVENANCE, rewritten from results/*.json
(issue 47: a figure without a file is not a result).

    python3 bench/compare_table.py            rewrite them from results/ (the one command after a GPU run)
    python3 bench/compare_table.py --check    exit 1, naming the files, when they differ from what
                                              results/ gives (the unit suite runs this)
    python3 bench/compare_table.py FILE.json  print flashmla_compare.py's tables of one file

The documents hold the figures between markers, `<!-- figures: NAME -->` and `<!-- end figures -->`;
everything between them is this script's, everything outside is prose without figures. A file of
flashmla_compare.py whose headline was refused (FlashMLA drifted between rounds) is not tabulated:
the script says "rerun" and exits 2. Files from before issue 47 (no provenance inside, one round)
are read and said to be so. Only the standard library: runs on any machine.
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402  (bench/figures.py: the tables)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"(<!-- figures: ([a-z0-9_-]+) -->\n)(.*?)(<!-- end figures -->)", re.S)


def load_results(folder):
    """{file name: its JSON, upgraded to the current shape} of every results/*.json."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            out[os.path.basename(path)] = figures.upgrade(os.path.basename(path), json.load(f))
    return out


def fill(text, blocks, name):
    """text with every marked block replaced by blocks[its name]; a block without a renderer, or a
    renderer whose block is missing, is an error naming both."""
    seen = set()

    def sub(m):
        key = m.group(2)
        if key not in blocks:
            raise SystemExit(f"{name}: block '{key}' has no renderer in bench/figures.py")
        seen.add(key)
        return m.group(1) + blocks[key].rstrip("\n") + "\n" + m.group(4)

    new = MARK.sub(sub, text)
    return new, seen


def documents(root, res):
    """{path: new text} of the documents and the provenance index."""
    blocks = figures.blocks(res)
    out, used = {}, set()
    for doc in ("BENCHMARKS.md", "README.md"):
        path = os.path.join(root, doc)
        with open(path) as f:
            text, seen = fill(f.read(), blocks, doc)
        out[path] = text
        used |= seen
    missing = sorted(set(blocks) - used)
    if missing:
        raise SystemExit(f"no document holds the block(s) {', '.join(missing)}: add their markers")
    out[os.path.join(root, "results", "PROVENANCE")] = figures.provenance_index(res)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="one flashmla_compare.py JSON: print its tables")
    ap.add_argument("--check", action="store_true", help="only say whether the documents are up to date")
    ap.add_argument("--root", default=ROOT, help="the checkout (default: this script's)")
    args = ap.parse_args(argv)
    if args.file:
        with open(args.file) as f:
            data = figures.upgrade("flashmla_compare.json", json.load(f))
        print(figures.compare_tables(data))
        return 0
    res = load_results(os.path.join(args.root, "results"))
    refused = figures.refused(res)
    if refused:
        print(f"not regenerated: {refused}", file=sys.stderr)
        return 2
    stale = []
    for path, text in documents(args.root, res).items():
        if os.path.exists(path):
            with open(path) as f:
                if f.read() == text:
                    continue
        stale.append(os.path.relpath(path, args.root))
        if not args.check:
            with open(path, "w") as f:
                f.write(text)
    if args.check:
        if stale:
            print(f"{', '.join(stale)}: not what results/ gives; run python3 bench/compare_table.py", file=sys.stderr)
            return 1
        print("BENCHMARKS.md, README.md and results/PROVENANCE hold what results/*.json give")
        return 0
    print(f"rewrote {', '.join(stale)}" if stale else "nothing to rewrite: the documents hold what results/ gives")
    return 0


if __name__ == "__main__":
    sys.exit(main())
