#!/usr/bin/env python3
"""bench/plot_results.py draws both charts: quality.png from the committed
results/quality.json, bench.png from a file of bench.json's shape whose numbers are placeholders
(1.0 everywhere: this checks the drawing, the real chart comes from the GPU run's bench.json).
Skips (77) without matplotlib.
    usage: check_plot_results.py SOURCE_ROOT
"""
import json
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
try:
    import matplotlib  # noqa: F401
except ImportError:
    print("matplotlib not installed (apt-get install python3-matplotlib): skipped")
    sys.exit(77)
ops = ["ceiling: copy", "ceiling: gather368", "write per-token", "write static", "write per-token mse",
       "write static mse", "gather per-token", "gather static"]
ops += [f"attend {layout} h={h}" for layout in ("nvfp4-368", "fp8-656") for h in (16, 32, 64, 128)]
rows = [{"op": op, "size": size, "median_us": 1.0, "tbps": 1.0, "ratio": 1.0, "ceiling": "copy", "check": "-"}
        for op in ops for size in ((1, 262144) if op.startswith(("write", "gather")) else (262144,))]
for row in rows:  # the spread of today's bench rows (older files have none: both shapes are drawn)
    if row["op"].startswith("attend nvfp4-368"):
        row.update(min_us=0.9, p25_us=0.95, p75_us=1.05, max_us=1.2, samples=20)
with tempfile.TemporaryDirectory() as out:
    shape = os.path.join(out, "bench-shape.json")
    with open(shape, "w") as f:
        json.dump({"device": "placeholder", "copy_tbps": 1.0, "gather368_tbps": 1.0, "rows": rows}, f)
    subprocess.run([sys.executable, os.path.join(root, "bench/plot_results.py"),
                    "--quality", os.path.join(root, "results/quality.json"), "--bench", shape, "--out", out], check=True)
    for name in ("quality.png", "bench.png"):
        with open(os.path.join(out, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
print("ok: quality.png and bench.png drawn")
