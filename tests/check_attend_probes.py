#!/usr/bin/env python3
"""bench/attend_probes.py without a GPU or PyTorch (issue 46): its --help; the plan's tiles it divides
by, from tests/data/attend_plan.tsv, for its three cases on the H200; its switch names and probe bits
against kernels/attend/lib/attend_probe.cuh and kernels/meson.build; how it finds probe plugins; and its
JSON rows through bench/figures.py (the plugin's row checked, the probes' unchecked, us a CTA-tile).
    usage: check_attend_probes.py SOURCE_ROOT
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "bench"))
import attend_probes as ap  # noqa: E402
import figures  # noqa: E402

from check_harness import expect, finish  # noqa: E402  (tests/, beside this script)


def help_without_torch():
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "attend_probes.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    expect(run.returncode == 0 and "--probes" in run.stdout and "stage-removal" in run.stdout,
           "attend_probes.py --help runs without a GPU (PyTorch is imported by the run only)")


def plan_tiles():
    table = ap.plan_table(os.path.join(root, "tests", "data", "attend_plan.tsv"))
    h200 = (132, 90, 232448, False)
    want = {"decode b=128 h=64": (128, 32, 128, 32.0), "decode b=128 h=128": (256, 32, 132, 8192 / 132),
            "prefill 4096 h=128": (8192, 32, 132, 262144 / 132)}
    for name, batch, s_q, h, _ in ap.CASES:
        p = ap.plan_for(table, *h200, batch * s_q, h)
        got = p and (p["items"], p["tiles_per_item"], p["ctas"], p["tiles_per_cta"])
        expect(p is not None and p["kind"] == "wide" and got[:3] == want[name][:3] and abs(got[3] - want[name][3]) < 1e-9,
               f"{name}: the plan's table gives {got} (items, tiles an item, CTAs, tiles a CTA), the wide kind")
    expect(ap.plan_for(table, 100, 90, 232448, False, 128, 64) is None, "a device the table has no row for: no plan")
    cap99 = ap.plan_for(table, 132, 90, 101376, False, 128, 64)
    expect(cap99 is None or cap99["device"] == "h200_cap99", "the 99 KB configuration reads its own rows")


def switches_match_sources():
    with open(os.path.join(root, "kernels", "attend", "lib", "attend_probe.cuh")) as f:
        enum = {int(v): n for n, v in re.findall(r"ATT_PROBE_(NO_\w+) = (\d+)", f.read())}
    expect(enum == ap.SWITCHES, f"the script's switches {ap.SWITCHES} are attend_probe.cuh's {enum}")
    with open(os.path.join(root, "kernels", "meson.build")) as f:
        m = re.search(r"attend_probe_bits = \[([0-9, ]+)\]", f.read())
    bits = [int(b) for b in m.group(1).split(",")] if m else []
    expect(bits and all(b in ap.WHAT and b & ~31 == 0 for b in bits),
           f"every probe kernels/meson.build builds ({bits}) has its words in the script")


def finds_probes():
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("libnvfp4_mla_attend_probe3.so", "libnvfp4_mla_attend_probe12.so", "libnvfp4_mla.so",
                     "libnvfp4_mla_attend_probe3_kernels.a", "libnvfp4_mla_attend_probe.so"):
            open(os.path.join(tmp, name), "w").close()
        found = ap.probe_files(tmp)
    expect(sorted(found) == [3, 12], f"probe plugins are found by their file names ({sorted(found)})")


def rows_render():
    plan = {"device": "h200", "kind": "wide", "splits": 1, "items": 128, "tiles_per_item": 32, "ctas": 128,
            "tiles": 4096, "tiles_per_cta": 32.0, "most_tiles_a_cta": 32}
    check = {"check": "PASS", "worst_rel_rms": 3e-3, "worst_lse": 1e-7}
    times = {"plugin": [97.0, 96.5, 97.4], "probe3": [71.2, 71.0, 71.5], "probe4": [71.1, 71.3, 70.9]}
    decode = ap.case_row(ap.CASES[0], plan, times, check)
    prefill = ap.case_row(ap.CASES[2], None, {k: [v[0] * 57.0] * 3 for k, v in times.items()}, check)
    by = {b["build"]: b for b in decode["builds"]}
    expect(decode["check"] == "PASS" and by["plugin"]["check"] is check and by["probe3"]["check"] == "unchecked (probe)",
           "the plugin's row carries its check, a probe's says unchecked")
    share = statistics.median([71.2 / 97.0, 71.0 / 96.5, 71.5 / 97.4])
    expect(abs(by["plugin"]["us_per_cta_tile"] - 97.0 / 32) < 1e-9 and abs(by["probe3"]["of_plugin"]["median"] - share) < 1e-12,
           "us a CTA-tile is the median over the plan's tiles a CTA; a probe's share is the median of the rounds' ratios")
    report = {"config": {"rounds": 3, "reps": 7, "tokens": 4 << 20, "record_bytes": 368, "topk": 2048},
              "cases": [decode, prefill], "checks": "all PASS"}
    text = figures.probes_section(report)
    print(text)
    expect("| plugin | as committed | 97.0 us (3.03; 1.00) | 5.53 ms (-; 1.00) | PASS / PASS |" in text and
           "| probe 3 | producer reduced to barriers and key metadata" in text and
           "71.2 us (2.23; 0.73)" in text and "unchecked (probe: garbage by design)" in text,
           "figures renders a row a build: time, us a CTA-tile, share of the plugin's time, the check")
    missing = figures.blocks({})["what-bounds"]
    expect("`results/attend_probes.json` is not in results/" in missing, "without the file the block says so")


if __name__ == "__main__":
    help_without_torch()
    plan_tiles()
    switches_match_sources()
    finds_probes()
    rows_render()
    sys.exit(finish())
