#!/usr/bin/python3
"""CPU time a sample of each symbol in mixgrad's steady training step, from perf.

    bench/step_profile.py --amp off --batches 32,128,512 [--channels-last] [--threads 1] [--samples 8192]
    bench/step_profile.py --amp bf16 --batches 32,512 --primitives

Runs build/bench/train_step under `perf record` (cpu-clock, so time the step
spends preempted on a busy machine is not counted) twice per batch size:
3 timed steps, then 3 + K (K * batch = --samples). The difference per symbol
over K * batch is the steady step's CPU time a sample, with start-up, oneDNN's
JIT generation, warm-up and the measuring step cancelled. ONEDNN_JIT_PROFILE=2
makes oneDNN write a perf map, so its JIT kernels are named. --primitives
attributes the JIT kernels to oneDNN primitives instead: each kernel's address
range, in the order the perf map lists them, is matched to the primitive of its
kind that ONEDNN_VERBOSE=2 reports creating (cache misses) in the same order.
Prints one table row a symbol (or primitive): µs a sample per batch size, and
the largest batch's over the smallest's. Needs perf (and a perf_event_paranoid
that lets it sample its own children).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

FREQ = 5000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def step_args(o, batch, steps):
    return ([o.binary, "--model", o.model, "--amp", o.amp, "--batch", str(batch), "--warmup", "2", "--repeat", str(steps)]
            + (["--channels-last"] if o.channels_last else []))


def record(o, batch, steps, tmp):
    """perf report's lines (samples, address, dso, symbol) of one run, and the run's perf map entries."""
    data = os.path.join(tmp, "perf.data")
    env = dict(os.environ, MX_NUM_THREADS=str(o.threads), ONEDNN_JIT_PROFILE="2")
    subprocess.run(["perf", "record", "-q", "-F", str(FREQ), "-o", data] + step_args(o, batch, steps), env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "-v", "-F",
                             "sample,dso,sym", "-t", ";", "--stdio"], capture_output=True, text=True, check=True).stdout
    pids = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "pid"], capture_output=True, text=True,
                          check=True).stdout
    pid = re.search(r"(\d+):train_step", pids).group(1)
    perf_map = f"/tmp/perf-{pid}.map"
    entries = []
    if os.path.exists(perf_map):
        with open(perf_map) as f:
            for line in f:
                start, size, name = line.split(maxsplit=2)
                entries.append((int(start, 16), int(size, 16), name.strip()))
        os.unlink(perf_map)
    os.unlink(data)
    rows = []
    for line in report.splitlines():
        parts = line.split(";")
        if line.startswith("#") or len(parts) < 3 or not parts[0].strip().isdigit():
            continue
        dso, sym = os.path.basename(parts[1].strip()), parts[2].strip()  # -v names the file in full
        if dso.startswith("perf-") and dso.endswith(".map"):
            dso = "[JIT]"
        m = re.match(r"(0x[0-9a-f]+)\s+\S\s+\[.\]\s+(.*)", sym)  # -v: the address, then the symbol
        address, name = (int(m.group(1), 16), m.group(2).strip()) if m else (None, re.sub(r"^\S*\s*\[.\]\s+", "", sym))
        rows.append((int(parts[0]), address, dso, name))
    return rows, entries


def symbol_of(dso, name):
    if dso == "[JIT]":
        return "[JIT] " + ("?" if name.startswith("0x") else name)
    if dso.startswith("[kernel"):
        return "kernel"
    if not dso.startswith("libmixgrad"):
        return dso.split(".so")[0] + " (other)"
    return name


def created_primitives(o, batch):
    env = dict(os.environ, MX_NUM_THREADS=str(o.threads), ONEDNN_VERBOSE="2")
    out = subprocess.run(step_args(o, batch, 3), env=env, capture_output=True, text=True, check=True).stdout
    queues = collections.defaultdict(list)
    for line in out.splitlines():
        if ",create:cache_miss," not in line:
            continue
        f = line.split(",")
        kind, impl, prop, shape = f[3], f[4], f[5], f[9]
        if not shape.endswith("x3x3"):  # an activation: its batch dim says nothing across batch sizes
            shape = re.sub(r"\bmb%d" % batch, "mb", re.sub(r"^%dx" % batch, "Nx", shape))
        if kind == "reorder":
            shape += " " + "->".join(md.split(":")[3] for md in f[6].split(" ")[:2])
        queues["reorder" if kind == "reorder" else f"{kind} {prop}"].append(f"{kind} {prop} {impl} {shape}")
    return queues


def kernel_kind(name):
    if "reorder" in name or "single_blk" in name:
        return "reorder"
    if "conv" in name or "bf16_fwd" in name or "bf16_bwd" in name:
        for prop, key in (("backward_data", "bwd_data"), ("backward_weights", "bwd_weights"), ("forward_training", "fwd")):
            if key in name:
                return "convolution " + prop
    return None


def primitive_labels(entries, queues):
    queues = {k: list(v) for k, v in queues.items()}
    labels = []
    for _, _, name in entries:
        kind = kernel_kind(name)
        labels.append(queues[kind].pop(0) if kind and queues.get(kind) else "other JIT: " + name)
    return labels


def costs(o, batch, tmp):
    k = max(4, o.samples // batch)
    queues = created_primitives(o, batch) if o.primitives else None
    totals = collections.Counter()
    for steps, sign in ((3, -1), (3 + k, 1)):
        rows, entries = record(o, batch, steps, tmp)
        labels = primitive_labels(entries, queues) if o.primitives else None
        for samples, address, dso, name in rows:
            if o.primitives:
                if dso != "[JIT]":
                    continue
                hit = [i for i, (a, size, _) in enumerate(entries) if address is not None and a <= address < a + size]
                key = labels[hit[0]] if hit else "other JIT: ?"
            else:
                key = symbol_of(dso, name)
            totals[key] += sign * samples
    return {key: n / FREQ / (k * batch) * 1e6 for key, n in totals.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--amp", default="off")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=8192, help="samples in the longer run's extra steps")
    ap.add_argument("--primitives", action="store_true", help="oneDNN's JIT code by primitive")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "train_step"))
    o = ap.parse_args()
    batches = [int(b) for b in o.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        per = {b: costs(o, b, tmp) for b in batches}
    keys = sorted({k for c in per.values() for k in c}, key=lambda k: -per[batches[-1]].get(k, 0))
    print("| %s | %s | b%d / b%d |" % ("primitive" if o.primitives else "symbol", " | ".join(f"b{b}" for b in batches),
                                      batches[-1], batches[0]))
    print("|---|" + "---|" * (len(batches) + 1))
    for key in keys:
        v = [per[b].get(key, 0.0) for b in batches]
        if max(abs(x) for x in v) >= 0.5:
            ratio = "%.2f" % (v[-1] / v[0]) if v[0] > 0.3 else "-"
            print("| %s | %s | %s |" % (key, " | ".join("%.1f" % x for x in v), ratio))
    total = [sum(per[b].values()) for b in batches]
    print("| total | %s | %s |" % (" | ".join("%.1f" % x for x in total), "%.2f" % (total[-1] / total[0]) if total[0] else "-"))


if __name__ == "__main__":
    sys.exit(main())
