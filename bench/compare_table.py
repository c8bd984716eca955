"""Markdown tables from flashmla_compare.py's JSON (BENCHMARKS.md's decode grid, batch-128 and prefill rows).

Usage: python3 bench/compare_table.py results/flashmla_compare.json
"""
import json
import sys


def grid_table(rows, s_q):
    cells = {(r["batch"], r["h"]): r for r in rows if r["s_q"] == s_q}
    heads = sorted({h for _, h in cells})
    batches = sorted({b for b, _ in cells})
    out = ["| batch | " + " | ".join(f"h = {h}: FlashMLA / attend" for h in heads) + " |",
           "|---|" + "---|" * len(heads)]
    for b in batches:
        line = [str(b)]
        for h in heads:
            r = cells.get((b, h))
            if r is None:
                line.append("")
                continue
            f, a = r["flashmla_us"]["median"], r["attend368_us"]["median"]
            mark = "" if r["check"] == "PASS" else " CHECK FAILED"
            line.append(f"{f:.1f} / {a:.1f} ({f / a:.2f}x){mark}")
        out.append("| " + " | ".join(line) + " |")
    return "\n".join(out)


def main():
    report = json.load(open(sys.argv[1]))
    grid = report.get("grid", [])
    for s_q in (1, 2):
        if any(r["s_q"] == s_q for r in grid):
            print(f"\nDecode, graph replay, s_q = {s_q} (us a call, median; ratio = FlashMLA / attend):\n")
            print(grid_table(grid, s_q))
    if grid:
        worst = max(grid, key=lambda r: r["worst_rel_rms"])
        print(f"\nChecks: {sum(r['check'] == 'PASS' for r in grid)} of {len(grid)} cells PASS; worst row relative "
              f"RMS {worst['worst_rel_rms']:.1e} (b={worst['batch']}, s_q={worst['s_q']}, h={worst['h']})")
    if report.get("decode"):
        print("\n| h | FlashMLA (padded h) | attend 656 | attend 368 | 368 TFLOP/s | checks 656 / 368 |")
        print("|---|---|---|---|---|---|")
        for r in report["decode"]:
            f, a6, a3 = (r[k]["median"] for k in ("flashmla_us", "attend656_us", "attend368_us"))
            print(f"| {r['h']} | {f:.1f} ({r['flashmla_heads']}) | {a6:.1f} ({f / a6:.2f}x) | "
                  f"{a3:.1f} ({f / a3:.2f}x) | {r['attend368_tflops']:.1f} | {r['check656_vs_flashmla']['check']} / "
                  f"{r['check368_vs_flashmla_bf16']['check']} |")
    if report.get("prefill"):
        print("\n| h | FlashMLA bf16 | attend 368 | gather + FlashMLA | check |\n|---|---|---|---|---|")
        for r in report["prefill"]:
            f, a, g = (r[k]["median"] / 1e3 for k in ("flashmla_bf16_us", "attend368_us", "gather_flashmla_us"))
            print(f"| {r['h']} | {f:.2f} ms | {a:.2f} ms ({f / a:.2f}x) | {g:.2f} ms | {r['check']} |")


if __name__ == "__main__":
    main()
