#!/usr/bin/python3
"""Draws bench/run_train.py's ratios (mixgrad / best PyTorch setting step time, medians)
as a bar chart with gnuplot: one bar per model and amp at the main batch
sizes, then the CNN at every batch size, with the line at 1 (equal speed).

    /usr/bin/python3 bench/chart.py bench/train.json bench/ratios.png
"""
import json
import subprocess
import sys


def bars(summary):
    """(label, ratio) for every configuration both implementations ran."""
    out = []
    for s in summary:
        model, amp, batch, threads = s["config"]
        m, t = s.get("mixgrad") or {}, s.get("best") or {}
        if m.get("median") and t.get("median"):
            out.append((f"{model} {amp} b{batch} t{threads}", m["median"] / t["median"]))
    return out


def main():
    source, target = sys.argv[1], sys.argv[2]
    data = bars(json.load(open(source))["summary"])
    if not data:
        sys.exit("chart: no configuration with both implementations in " + source)
    script = [
        f"set terminal pngcairo size {max(700, 40 * len(data))},480 font 'DejaVu Sans,10' noenhanced",
        f"set output '{target}'",
        "set title 'training step time, mixgrad / best PyTorch setting (median; below 1: mixgrad is faster)'",
        "set style fill solid 0.8 border -1", "set boxwidth 0.7", "set grid ytics lc rgb '#dddddd'",
        "set xtics rotate by -50 left", "set yrange [0:*]", "set key off", "set bmargin 9", "set rmargin 8",
        "$d << EOD", *[f'"{label}" {r:.4f}' for label, r in data], "EOD",
        "plot $d using 0:2:xtic(1) with boxes lc rgb '#4292c6', 1 with lines lw 2 dt 2 lc rgb '#d62728'",
    ]
    subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, check=True)


if __name__ == "__main__":
    main()
