#!/usr/bin/env python3
"""Mean and spread over several `nvfp4-mla quality --seed S --json FILE` runs (QUALITY.md).

One run's attention table measures 4 queries x 16 heads, whose output on deep layers is dominated by
a few large-norm tokens: a single run's cell moves by several points from seed to seed. The mean over
seeds shows what a mode or writer policy does; the per-seed wins count how often it does it.

    quality_seeds.py q1.json q2.json ...   (each from `nvfp4-mla quality --tokens 512 --seed S --json qS.json`)
"""
import json
import statistics
import sys


def attend_cells(paths):
    """{(layer, mode): [rel_rms per run]} of the attention rows, and the modes in file order."""
    cells, modes = {}, []
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["layers"]:
                if row.get("attend"):
                    cells.setdefault((row["layer"], row["mode"]), []).append(row["rel_rms"])
                    if row["mode"] not in modes:
                        modes.append(row["mode"])
    return cells, modes


def main(paths):
    cells, modes = attend_cells(paths)
    layers = sorted({layer for layer, _ in cells})
    print(f"attention output, relative RMS error: mean (standard deviation) over {len(paths)} seeds")
    print("layer | " + " | ".join(modes))
    for layer in layers:
        vals = [cells.get((layer, m), []) for m in modes]
        print(f"{layer} | " + " | ".join(f"{100 * statistics.mean(v):.2f}% ({100 * statistics.pstdev(v):.2f})"
                                         for v in vals))
    for base in ("static", "per-token"):
        policy = next((m for m in modes if m.startswith(base + "-")), None)
        for layer in layers if policy else []:
            a, b = cells[(layer, base)], cells[(layer, policy)]
            wins = sum(y < x for x, y in zip(a, b))
            print(f"layer {layer}: {policy} below {base} in {wins} of {len(a)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
