#!/usr/bin/env python3
"""The CI's own tools on made-up input (issue 57), standard library only:
  - .ci/ptxas-check reads ptxas -v's lines (entry, 'Function properties', 'Used N registers' in
    either order), passes a build equal to its baseline, and fails naming each kernel whose
    registers or spills changed, a new kernel and a vanished one; an architecture on one side only
    is noted, not compared; the committed baseline parses and holds sm_90a rows;
  - .ci/skips names a Meson skip by the test's last line and counts pytest's -rs lines n each.
    usage: check_ci_tools.py SOURCE_ROOT
"""
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile

root = os.path.abspath(sys.argv[1])
from check_harness import expect, finish  # noqa: E402  (tests/, beside this script)


def load(name):
    """A .ci/ script (no .py suffix) as a module."""
    path = os.path.join(root, ".ci", name)
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def ptxas_log(kernels):
    """ptxas -v's lines for {(arch, name): (registers, stack, stores, loads)}, the properties line
    before 'Used' for the first kernel and after it for the others (ptxas prints both orders)."""
    out = ["[3/9] Compiling Cuda object kernels/x.cu.o"]
    for i, ((arch, name), (regs, stack, st, ld)) in enumerate(kernels.items()):
        props = [f"ptxas info    : Function properties for {name}",
                 f"    {stack} bytes stack frame, {st} bytes spill stores, {ld} bytes spill loads"]
        used = [f"ptxas info    : Used {regs} registers, used 1 barriers, 384 bytes cmem[0]"]
        out += [f"ptxas info    : Compiling entry function '{name}' for '{arch}'"] + (props + used if i == 0 else used + props)
    return out


def ptxas_rules():
    pc = load("ptxas-check")
    base = {("sm_90a", "_Z1aPf"): (40, 0, 0, 0), ("sm_90a", "_Z1bPf"): (128, 16, 24, 24)}
    found = pc.parse(ptxas_log(base))
    expect(found == {k: dict(zip(pc.FIELDS, v)) for k, v in base.items()},
           "ptxas -v's lines parse into registers, stack and spills a kernel, either order")
    with tempfile.TemporaryDirectory() as tmp:
        bpath = os.path.join(tmp, "baseline.tsv")
        pc.write_baseline(bpath, found)
        expect(pc.read_baseline(bpath) == found, "a baseline written reads back the same")
        problems, notes = pc.compare(found, pc.read_baseline(bpath))
        expect(not problems and not notes, "a build equal to its baseline passes")
        changed = dict(base)
        changed[("sm_90a", "_Z1bPf")] = (128, 16, 32, 32)
        changed[("sm_90a", "_Z1cPf")] = (32, 0, 0, 0)
        del changed[("sm_90a", "_Z1aPf")]
        changed[("sm_100a", "_Z1aPf")] = (40, 0, 0, 0)
        problems, notes = pc.compare(pc.parse(ptxas_log(changed)), pc.read_baseline(bpath))
        text = "\n".join(problems)
        expect(len(problems) == 3 and "_Z1bPf" in text and "SPILLS" in text and "_Z1cPf: new kernel" in text
               and "_Z1aPf: in the baseline, not built" in text,
               "more spills, a new kernel and a vanished one: each named")
        expect(notes == ["sm_100a: in the build, not in the baseline: not compared"],
               "an architecture the baseline lacks is noted, not compared")
        log = os.path.join(tmp, "compile.log")
        with open(log, "w") as f:
            f.write("\n".join(ptxas_log(changed)) + "\n")
        expect(pc.main([log, "--baseline", bpath]) == 1, "the command exits 1 on a difference")
    committed = pc.read_baseline(pc.BASELINE)
    archs = sorted({a for a, _ in committed})
    expect(len(committed) > 20 and "sm_90a" in archs,
           f"the committed baseline parses ({len(committed)} kernels of {', '.join(archs)})")


def skips_rules():
    sk = load("skips")
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "build-x", "meson-logs"))
        tests = [{"name": "nvfp4-mla:unit / bench_scripts", "result": "SKIP", "stdout": "torch not installed: skipped\n"},
                 {"name": "nvfp4-mla:shim / python_shim", "result": "OK",
                  "stdout": "...\nSKIPPED [3] tests/test_torch_ops.py:25: PyTorch is not installed here\n"
                            "SKIPPED [1] tests/test_dcp.py:14: could not import 'torch'\n5 passed, 4 skipped\n"},
                 {"name": "nvfp4-mla:unit / figures", "result": "OK", "stdout": "all passed\n"}]
        with open(os.path.join(tmp, "build-x", "meson-logs", "testlog.json"), "w") as f:
            f.writelines(json.dumps(t) + "\n" for t in tests)
        found = sk.from_testlog(os.path.join(tmp, "build-x"))
    expect(sum(n for n, _, _ in found) == 5 and (1, "build-x: unit / bench_scripts", "torch not installed: skipped") in found
           and (3, "build-x: shim / python_shim (pytest)", "tests/test_torch_ops.py:25: PyTorch is not installed here")
           in found, ".ci/skips: a Meson skip with its reason, pytest's skips counted n each")


if __name__ == "__main__":
    ptxas_rules()
    skips_rules()
    sys.exit(finish())
