"""Every figure of BENCHMARKS.md and README.md, and results/PROVENANCE, rewritten from results/*.json
(issue 47: a figure without a file is not a result).

    python3 bench/compare_table.py            rewrite them from results/ (the one command after a GPU run)
    python3 bench/compare_table.py --check    exit 1, naming the files, when they differ from what
                                              results/ gives (the unit suite runs this)
    python3 bench/compare_table.py FILE.json  print flashmla_compare.py's tables of one file

The documents hold the figures between markers, `<!-- figures: NAME -->` and `<!-- end figures -->`;
everything between them is this script's. Prose that quotes measured figures sits between
`<!-- quotes: FILE [FILE...] -->` and `<!-- end quotes -->` (FILE relative to results/, e.g.
attend_probes.json or runs/issue46-ring-seesaw-ab.txt): the first line after the opening marker is
this script's (which files, and whether each measured the tree's device code), the rest is written
by hand. Everything else is prose without measured figures: --check fails on a time (us, ms), a rate
(TB/s, GB/s, TFLOP/s) or a ratio (1.53x) outside both kinds of block, except a ratio of record sizes
(656 / 368 = 1.78x; with DeepSeek-V3.2's 132-byte indexer row 1.58x), which is arithmetic.

Device code (issue 57): every results file records the digest of the device code it measured
(provenance.device_code, bench/device_code.py); a file whose digest is not the tree's, or that
records none, is STALE (unless results/device_code_equivalence.tsv links its digest to the tree's:
machine code identical, bench/device_code.py EQUIVALENCE), and every caption, README line, summary row and quote line of its figures
says so in the text itself. So a kernel edit makes --check fail until this script has marked the
figures it made stale (or a GPU run has replaced them).

A file of flashmla_compare.py with fewer than 3 rounds has no headline and is not tabulated (exit
2); one that kept only some cells is (its drifted cells marked and left out of the claims). Files
from before issue 47 (no provenance inside, one round) are read and said to be so. Only the
standard library: runs on any machine.
"""
import argparse
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_code  # noqa: E402  (bench/device_code.py: the digest of the kernels)
import figures  # noqa: E402  (bench/figures.py: the tables)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(r"(<!-- figures: ([a-z0-9_-]+) -->\n)(.*?)(<!-- end figures -->)", re.S)
# (group 3: the script's own line when there is one, so that a block written without it loses no prose)
QUOTES = re.compile(r"(<!-- quotes: ([^>]+?) -->\n)((?:_Quoted from |\(this line is)[^\n]*\n)?(.*?)(<!-- end quotes -->)",
                    re.S)
# A measured figure in prose: a time, a rate or a ratio (ranges included: 2.95-3.01 us).
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:\s?-\s?\d+(?:\.\d+)?)?)\s?(x|us|ms|TB/s|GB/s|TFLOP/s)(?![\w/])")
RECORD_BYTES = (368, 432, 656)
INDEXER_ROW = 132  # DeepSeek-V3.2's indexer row a token and layer, kept beside either record


def record_ratios():
    """The ratios of record sizes, with and without the indexer row, as "1.78": arithmetic, not
    measurements, so prose may quote them."""
    out = set()
    for a in RECORD_BYTES:
        for b in RECORD_BYTES:
            if a > b:
                out |= {f"{a / b:.2f}", f"{(a + INDEXER_ROW) / (b + INDEXER_ROW):.2f}"}
    return out


def load_results(folder, root=None):
    """{file name: its JSON, upgraded to the current shape} of every results/*.json, each marked
    with the device code it measured against the tree's (root: the checkout; default this one)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            out[os.path.basename(path)] = figures.upgrade(os.path.basename(path), json.load(f))
    return figures.mark_code(out, device_code.current(root or ROOT), device_code.of_results)


def quote_line(root, current, names):
    """The line this script writes under a quotes marker: each quoted file and its device code."""
    parts = []
    for name in names.split():
        path = os.path.join(root, "results", name)
        if not os.path.exists(path):
            raise SystemExit(f"a quotes block names results/{name}, which does not exist")
        rec = None
        if name.endswith(".json"):
            with open(path) as f:
                rec = device_code.of_results(json.load(f))
        d = {"_code": figures.code_of(rec, current)}
        parts.append(f"`results/{name}`" + figures.code_words(d).replace("; ", ": ", 1))
    return "_Quoted from " + "; ".join(parts) + "._\n"


def unquoted_figures(text):
    """[(line number, figure)] of measured figures outside the figures and quotes blocks."""
    blank = lambda m: "\n" * m.group(0).count("\n")  # noqa: E731  (keep the line numbers)
    rest = QUOTES.sub(blank, MARK.sub(blank, text))
    allowed = record_ratios()
    found = []
    for i, line in enumerate(rest.split("\n"), 1):
        for num, unit in FIGURE.findall(line):
            if unit == "x" and num in allowed:
                continue
            found.append((i, f"{num} {unit}".replace(" x", "x")))
    return found


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
    current = device_code.current(root)
    out, used = {}, set()
    for doc in ("BENCHMARKS.md", "README.md"):
        path = os.path.join(root, doc)
        with open(path) as f:
            text, seen = fill(f.read(), blocks, doc)
        text = QUOTES.sub(lambda m: m.group(1) + quote_line(root, current, m.group(2)) + m.group(4) + m.group(5), text)
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
    res = load_results(os.path.join(args.root, "results"), args.root)
    refused = figures.refused(res)
    if refused:
        print(f"not regenerated: {refused}", file=sys.stderr)
        return 2
    tree = device_code.short(device_code.digest(args.root))
    old = [f"{n} ({device_code.short(d['_code']['recorded']) or 'no digest'})" for n, d in sorted(res.items())
           if d["_code"]["stale"]]
    print(f"device code of the tree: {tree}; results of other device code, marked {figures.STALE}: "
          + (", ".join(old) if old else "none"))
    loose = []
    for doc in ("BENCHMARKS.md", "README.md"):
        with open(os.path.join(args.root, doc)) as f:
            loose += [f"{doc}:{line}: {fig}" for line, fig in unquoted_figures(f.read())]
    if loose:
        print("measured figures outside a figures or quotes block (no file, no device code, no stale mark):\n  "
              + "\n  ".join(loose), file=sys.stderr)
        return 1
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
