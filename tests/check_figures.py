#!/usr/bin/env python3
"""The figures against the kernels they measured (issue 57), on a copy of the checkout in a
temporary folder (standard library only, no GPU):
  - bench/device_code.py: the digest depends on the files' bytes and paths only (not on git, file
    times or listing order), and changes with one byte of a kernel or of the CUDA flags;
  - a results file stamped with the tree's digest is current; after a kernel edit it is STALE,
    `compare_table.py --check` fails until the documents carry the mark, and every figure of that
    file (captions, README lines, summary rows, quoted prose) then does;
  - a measured figure in prose outside a figures or quotes block fails --check; a ratio of record
    sizes (656 / 368 = 1.78x) does not;
  - a results file without a digest is STALE; a stamp never overwrites another digest;
  - results/device_code_equivalence.tsv: a file whose digest a row (or a chain of rows) links to the
    tree's is current, captioned as machine code identical; a malformed row stops the script.
    usage: check_figures.py SOURCE_ROOT
"""
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile

root = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(root, "bench"))
import compare_table  # noqa: E402
import device_code  # noqa: E402

from check_harness import expect, finish  # noqa: E402  (tests/, beside this script)


def quiet(fn, *args):
    """fn(*args) with its output captured: (return value, stdout + stderr)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = fn(*args)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue()


def copy_tree(dst):
    """The parts of the checkout the figures need: the documents, results/, bench/'s scripts, the
    device code (kernels/ and the build files)."""
    for name in ("BENCHMARKS.md", "README.md") + device_code.SCOPE_FILES:
        if os.path.exists(os.path.join(root, name)):
            shutil.copy2(os.path.join(root, name), dst)
    for d in ("results", "kernels"):
        shutil.copytree(os.path.join(root, d), os.path.join(dst, d),
                        ignore=shutil.ignore_patterns("__pycache__"))


def digest_rules(tmp):
    here = device_code.digest(root)
    expect(device_code.digest(tmp) == here, "a copy without .git has the checkout's digest")
    for dirpath, _, files in os.walk(os.path.join(tmp, "kernels")):
        for f in files:
            os.utime(os.path.join(dirpath, f), (1, 1))
    expect(device_code.digest(tmp) == here, "file times do not change it")
    kernel = os.path.join(tmp, "kernels", "record_read.cuh")
    with open(kernel, "ab") as f:
        f.write(b"\n")
    edited = device_code.digest(tmp)
    expect(edited != here, "one byte more in a kernel header changes it")
    with open(kernel, "rb") as f:
        text = f.read()
    with open(kernel, "wb") as f:
        f.write(text[:-1])
    expect(device_code.digest(tmp) == here, "and taking it out gives the old digest back")
    top = os.path.join(tmp, "meson.build")
    with open(top, "a") as f:
        f.write("# an install rule\n")
    expect(device_code.digest(tmp) == here, "what the top meson.build says after its CUDA block is not part of it")
    with open(top) as f:
        text = f.read()
    with open(top, "w") as f:
        f.write(text.replace("cuda_gencode += '-gencode=arch=compute_90,code=compute_90'", "cuda_gencode += []", 1))
    expect(device_code.digest(tmp) != here, "its CUDA block (the gencode flags) is")
    shutil.copy2(os.path.join(root, "meson.build"), tmp)
    os.rename(kernel, kernel + ".moved")
    expect(device_code.digest(tmp) != here, "a moved kernel file changes it")
    os.rename(kernel + ".moved", kernel)


def drop_digest(tmp, name):
    """results/NAME without its device-code digest, as files from before the digest are: its path and
    what it now holds."""
    path = os.path.join(tmp, "results", name)
    with open(path) as f:
        data = json.load(f)
    data["provenance"].pop("device_code", None)
    with open(path, "w") as f:
        json.dump(data, f)
    return path, data


def stamp_rules(tmp):
    path, data = drop_digest(tmp, "bench.json")
    code, _ = quiet(device_code.stamp, path, tmp)
    with open(path) as f:
        stamped = json.load(f)
    expect(code == 0 and device_code.of_results(stamped) == device_code.digest(tmp)
           and stamped["rows"] == data["rows"], "--stamp adds the tree's digest and leaves the figures as they were")
    stamped["provenance"]["device_code"]["digest"] = "0" * 64
    with open(path, "w") as f:
        json.dump(stamped, f)
    code, text = quiet(device_code.stamp, path, tmp)
    expect(code == 1 and "not stamped" in text, "--stamp refuses a file that records another digest")
    return path


def block(text, name):
    start = text.index(f"<!-- figures: {name} -->")
    return text[start:text.index("<!-- end figures -->", start)]


def marking_rules(tmp):
    """Every results file stamped with the tree's code: current, no mark; a kernel edit: each
    stale, --check fails until regenerated, then each of their figures carries the mark."""
    for name in os.listdir(os.path.join(tmp, "results")):
        path = os.path.join(tmp, "results", name)
        if name.endswith(".json"):
            with open(path) as f:
                data = json.load(f)
            if isinstance(data.get("provenance"), dict):
                data["provenance"]["device_code"] = device_code.record(tmp)
                with open(path, "w") as f:
                    json.dump(data, f)
    code, text = quiet(compare_table.main, ["--root", tmp])
    with open(os.path.join(tmp, "README.md")) as f:
        readme = f.read()
    expect(code == 0 and "STALE" not in block(readme, "readme") and "(the tree's)" in readme,
           "files of the tree's device code: figures without the mark, captions say so")
    expect(quiet(compare_table.main, ["--check", "--root", tmp])[0] == 0, "and --check passes")

    with open(os.path.join(tmp, "kernels", "record_read.cuh"), "a") as f:
        f.write("// an edit\n")
    code, text = quiet(compare_table.main, ["--check", "--root", tmp])
    expect(code == 1 and "not what results/ gives" in text,
           "after a kernel edit --check fails: the documents quote stale figures without the mark")
    quiet(compare_table.main, ["--root", tmp])
    with open(os.path.join(tmp, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(tmp, "BENCHMARKS.md")) as f:
        bench = f.read()
    bullets = [line for line in block(readme, "readme").split("\n") if line.startswith("- ")]
    expect(bullets and all(line.startswith("- **STALE** ") for line in bullets),
           f"every README figure line carries the mark ({len(bullets)} lines)")
    rows = [line for line in block(bench, "summary").split("\n") if line.startswith("| ") and "`" in line]
    expect(rows and all("**STALE**" in line for line in rows), f"every summary row carries it ({len(rows)} rows)")
    expect("**STALE**: measured on device code" in block(bench, "decode128"), "and the tables' captions")
    expect("_Quoted from `results/attend_probes.json`: **STALE**" in bench, "and the quoted prose's line")
    expect(quiet(compare_table.main, ["--check", "--root", tmp])[0] == 0, "--check passes once they are marked")


def equivalence_rules(tmp):
    """After marking_rules (every file measured on the code before an edit, now STALE): a row of
    results/device_code_equivalence.tsv that links the measured digest to the tree's makes them
    current again, captioned as machine code identical; a chain of rows too; a row to another
    digest does not; a malformed row stops the script with the file and line."""
    with open(os.path.join(tmp, "results", "bench.json")) as f:
        measured = device_code.of_results(json.load(f))
    here = device_code.digest(tmp)
    path = os.path.join(tmp, device_code.EQUIVALENCE)

    def readme_after(rows):
        with open(path, "w") as f:
            f.write("# measured\tsame_as\tevidence\n" + "".join(f"{a}\t{b}\tkernel-text-compare: identical\n"
                                                               for a, b in rows))
        code, out = quiet(compare_table.main, ["--root", tmp])
        with open(os.path.join(tmp, "README.md")) as f:
            return code, out, block(f.read(), "readme")

    code, out, readme = readme_after([(measured, here)])
    expect(code == 0 and measured != here and "STALE" not in readme and "machine code identical" in readme,
           "a recorded equivalence to the tree's digest: current, captioned as machine code identical")
    middle = "ab" * 32
    code, out, readme = readme_after([(measured, middle), (middle, here)])
    expect(code == 0 and "STALE" not in readme, "a chain of two rows reaches the tree's digest: current")
    code, out, readme = readme_after([(measured, middle)])
    expect(code == 0 and "STALE" in readme, "a row to a digest that is not the tree's: still STALE")
    with open(path, "w") as f:
        f.write(f"{measured}\t{here[:12]}\tshort digest\n")
    code, out = quiet(compare_table.main, ["--root", tmp])
    expect(isinstance(code, str) and "device_code_equivalence.tsv:1: expected measured<TAB>same_as" in code,
           f"a malformed row stops the script, naming the file and line: {code!r}")
    os.remove(path)
    quiet(compare_table.main, ["--root", tmp])
    expect(quiet(compare_table.main, ["--check", "--root", tmp])[0] == 0, "the row taken out: marked STALE again")


def prose_rules(tmp):
    path = os.path.join(tmp, "BENCHMARKS.md")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text + "\nAttend now runs 9.8 us at batch 1.\n")
    code, out = quiet(compare_table.main, ["--check", "--root", tmp])
    expect(code == 1 and "9.8 us" in out, "a time in prose outside the blocks fails --check, named")
    with open(path, "w") as f:
        f.write(text + "\nIt is 1.35x faster now.\n")
    code, out = quiet(compare_table.main, ["--check", "--root", tmp])
    expect(code == 1 and "1.35x" in out, "so does a ratio")
    with open(path, "w") as f:
        f.write(text + "\nThe records hold 1.78x the tokens (1.58x with the indexer row).\n")
    expect(quiet(compare_table.main, ["--check", "--root", tmp])[0] == 0, "a ratio of record sizes is arithmetic: allowed")
    with open(path, "w") as f:
        f.write(text + "\n<!-- quotes: attend_probes.json -->\nThe wide kind runs 2.95 us a tile.\n<!-- end quotes -->\n")
    quiet(compare_table.main, ["--root", tmp])
    with open(path) as f:
        quoted = f.read()
    expect("-->\n_Quoted from `results/attend_probes.json`" in quoted and "The wide kind runs 2.95 us a tile." in quoted
           and quiet(compare_table.main, ["--check", "--root", tmp])[0] == 0,
           "a quotes block written without the script's line gets it, its prose kept; figures inside pass")
    with open(path, "w") as f:
        f.write(text)


def no_digest_rule(tmp):
    drop_digest(tmp, "hot_path.json")
    quiet(compare_table.main, ["--root", tmp])
    with open(os.path.join(tmp, "BENCHMARKS.md")) as f:
        bench = f.read()
    expect("**STALE**: no device-code digest recorded" in block(bench, "hot-path"),
           "a file without a digest is marked STALE too")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        copy_tree(tmp)
        digest_rules(tmp)
        stamp_rules(tmp)
        marking_rules(tmp)
        equivalence_rules(tmp)
        prose_rules(tmp)
        no_digest_rule(tmp)
    code, text = quiet(compare_table.main, ["--check", "--root", root])
    print(text.strip())
    expect(code == 0, "this checkout: the documents hold what results/ gives, stale figures marked")
    sys.exit(finish())
