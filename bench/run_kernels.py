#!/usr/bin/python3
"""Runs the kernel benchmarks side by side: bench/kernels (mixgrad, C) and bench/kernels.py (PyTorch)
in alternating rounds (who goes first alternates too), pools each measurement's times over the rounds
and writes markdown tables: medians, spread, time ratios mixgrad/PyTorch, GEMM as a share of oneDNN's
own matmul, bandwidth-bound kernels as a share of the copy bandwidth, and the issue's targets marked
PASS or MISS. Python 3 standard library only.

    ninja -C build bench/kernels
    bench/run_kernels.py --binary build/bench/kernels --out kernels.md --json kernels.json
    bench/run_kernels.py --quick ...           # a smoke test: small shapes, few repeats, one round

The targets (issue #8): dispatcher overhead <= 1 us per op; elementwise, cast, unscale and optimizer
kernels >= 70% of the copy bandwidth; GEMM >= 90% of oneDNN's own matmul.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

DISPATCH_TARGET_NS = 1000.0
BANDWIDTH_TARGET = 0.70
GEMM_TARGET = 0.90


# --- running --------------------------------------------------------------------------------------------

def run_side(cmd, env, round_no):
    """Runs one side and returns its (meta, results); its stderr passes through."""
    print("round %d: %s" % (round_no + 1, " ".join(cmd)), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        sys.exit("run_kernels: %s failed with status %d" % (cmd[0], proc.returncode))
    meta, results = {}, []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        if "meta" in obj:
            meta = obj
        else:
            obj["round"] = round_no
            results.append(obj)
    return meta, results


def run_all(args):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "2")
    extra = (["--quick"] if args.quick else []) + (["--only", args.only] if args.only else [])
    sides = [[args.binary] + extra, [args.python, os.path.join(HERE, "kernels.py")] + extra]
    metas, results = {}, []
    for r in range(args.rounds):
        for cmd in (sides if r % 2 == 0 else sides[::-1]):
            meta, res = run_side(cmd, env, r)
            metas[meta.get("meta", cmd[0])] = meta
            results += res
    return metas, results, env["OMP_NUM_THREADS"]


# --- pooling ------------------------------------------------------------------------------------------

def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


class Stat:
    """One measurement's times pooled over the rounds."""

    def __init__(self, first):
        self.metric, self.work, self.note, self.times = first["metric"], first["work"], first.get("note"), []

    @property
    def median_ms(self):
        return median(self.times)

    @property
    def value(self):
        m = self.median_ms
        return m * 1e6 / self.work if self.metric == "ns/op" else self.work / (m * 1e-3) / 1e9

    @property
    def spread(self):
        """(max - min) / median of the pooled times, in percent."""
        return 100.0 * (max(self.times) - min(self.times)) / self.median_ms


def pool(results):
    stats = {}
    for r in results:
        key = (r["impl"], r["bench"], r["shape"], r["dtype"], r.get("mode", ""))
        stats.setdefault(key, Stat(r)).times += r["times_ms"]
    return stats


# --- formatting ---------------------------------------------------------------------------------------

def fmt(v, digits=3):
    if v is None:
        return "—"
    if v >= 100:
        return "%.0f" % v
    return "%.*g" % (digits, v)


def cell(stat, what="value"):
    if stat is None:
        return "—"
    v = stat.value if what == "value" else stat.median_ms
    return "%s ±%.0f%%" % (fmt(v), stat.spread / 2)


def time_ratio(mine, theirs):
    return "—" if mine is None or theirs is None else "%.3g" % (mine.median_ms / theirs.median_ms)


def verdict(ok):
    return "—" if ok is None else ("PASS" if ok else "**MISS**")


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def ordered_keys(stats, benches):
    """(bench, shape, dtype, mode) in the order the benchmark printed them."""
    seen = []
    for (_, bench, shape, dtype, mode) in stats:
        k = (bench, shape, dtype, mode)
        if bench in benches and k not in seen:
            seen.append(k)
    return seen


# --- the sections ---------------------------------------------------------------------------------------

def gemm_section(stats, verdicts, emulated):
    """emulated: the dtypes mixgrad runs as an f32 GEMM between conversions on this CPU."""
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, {"matmul"}):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        # what mixgrad emulates (an f32 GEMM plus conversions) is held to oneDNN's f32 GEMM, measured in
        # turns with the 16-bit calls and reported under their label
        ceiling = stats.get(("onednn", bench, shape, dtype, mode))
        share = mine.value / ceiling.value if mine and ceiling else None
        ok = share >= GEMM_TARGET if share is not None else None
        verdicts.append(("GEMM %s %s >= 90%% of oneDNN" % (shape, dtype), ok))
        rows.append([shape, dtype, cell(mine), cell(torch), cell(ceiling) + (" (f32)" if dtype in emulated else ""),
                     time_ratio(mine, torch), "%.0f%%" % (100 * share) if share is not None else "—", verdict(ok)])
    if not rows:
        return ""
    return ("## GEMM (GFLOP/s)\n\nmixgrad's `mx_matmul` next to `torch.matmul` and to oneDNN's matmul called "
            "directly on the same operands (plain row-major; the ceiling), the two called in turns, call by call. "
            "%s emulated on this CPU (an f32 GEMM between conversions), so %s held to the f32 ceiling, "
            "measured again in turns with the 16-bit calls; PyTorch 1.13 has no f16 matmul on the CPU. "
            % (("f16 and bf16 are", "they are") if "bf16" in emulated else ("f16 is", "it is")) +
            "Target: >= 90% of oneDNN.\n\n" +
            table(["M=K=N", "dtype", "mixgrad", "PyTorch", "oneDNN", "time mixgrad/PyTorch",
                   "mixgrad % of oneDNN", "target"], rows))


def conv_section(stats):
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, {"conv2d_fwd", "conv2d_fwdbwd"}):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        rows.append([shape, "forward" if bench == "conv2d_fwd" else "fwd + bwd", dtype, cell(mine, "ms"),
                     cell(torch, "ms"), time_ratio(mine, torch), fmt(mine.value if mine else None),
                     fmt(torch.value if torch else None)])
    if not rows:
        return ""
    return ("## Convolution (3x3, stride 1, padding 1, no bias)\n\nfwd + bwd is the forward and `backward` to "
            "dW, and to dX except for a network's first layer (its input is data, as in training).\n\n" +
            table(["layer (N x C_in x H x W -> C_out)", "pass", "dtype", "mixgrad ms", "PyTorch ms",
                   "time mixgrad/PyTorch", "mixgrad GFLOP/s", "PyTorch GFLOP/s"], rows))


def pool_section(stats):
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, {"max_pool2d_fwd", "max_pool2d_fwdbwd"}):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        rows.append([shape, mode, "forward" if bench == "max_pool2d_fwd" else "fwd + bwd", dtype, cell(mine, "ms"),
                     cell(torch, "ms"), time_ratio(mine, torch), fmt(mine.value if mine else None),
                     fmt(torch.value if torch else None)])
    if not rows:
        return ""
    return ("## Max pooling (2x2, stride 2)\n\nforward: values and the indices backward needs (mixgrad's uint8 "
            "offsets, PyTorch's int64); fwd + bwd adds `backward` to dx. GB/s counts the values only, each once "
            "(x, y; dy, dx).\n\n" +
            table(["input (N x C x H x W)", "layout", "pass", "dtype", "mixgrad ms", "PyTorch ms",
                   "time mixgrad/PyTorch", "mixgrad GB/s", "PyTorch GB/s"], rows))


def copy_bandwidth(stats):
    """The faster memcpy (one thread, or split over the threads), as (GB/s, its name)."""
    best = None
    for (impl, bench, _, _, _), s in stats.items():
        if impl == "baseline" and (best is None or s.value > best[0]):
            best = (s.value, bench)
    return best


def bandwidth_rows(stats, benches, copy_bw, verdicts):
    """Rows for kernels held to the copy bandwidth (the 70% target), each verdict added to verdicts."""
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, benches):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        share = mine.value / copy_bw if mine and copy_bw else None
        ok = share >= BANDWIDTH_TARGET if share is not None else None
        verdicts.append(("%s %s >= 70%% of copy" % (bench, dtype), ok))
        rows.append([bench, dtype, cell(mine), cell(torch), time_ratio(mine, torch),
                     "%.0f%%" % (100 * share) if share is not None else "—",
                     "%.0f%%" % (100 * torch.value / copy_bw) if torch and copy_bw else "—", verdict(ok)])
    return rows


# The columns of the tables measured against the copy bandwidth (bandwidth_rows).
BANDWIDTH_COLUMNS = ["op", "dtype", "mixgrad GB/s", "PyTorch GB/s", "time mixgrad/PyTorch", "mixgrad % of copy",
                     "PyTorch % of copy", "target"]


def elementwise_section(stats, copy_bw, verdicts):
    rows = bandwidth_rows(stats, {"add", "mul", "relu", "add_", "relu_", "clone", "copy_", "cast"}, copy_bw,
                          verdicts)
    if not rows:
        return ""
    n = next(k[2] for k in stats if k[1] == "add") if any(k[1] == "add" for k in stats) else "?"
    return ("## Elementwise ops and casts (GB/s: bytes read + written)\n\n%s elements. add, mul, relu, clone "
            "and the casts make a fresh output each call (allocation and first-touch page faults included, as in "
            "PyTorch); add_, relu_ and copy_ write into the existing tensor (each call from the same random values). "
            "Target: >= 70%% of the copy "
            "bandwidth.\n\n" % n +
            table(BANDWIDTH_COLUMNS, rows))


def softmax_section(stats, copy_bw):
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, {"softmax", "log_softmax", "cross_entropy"}):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        rows.append([bench, shape, dtype, cell(mine, "ms"), cell(torch, "ms"), time_ratio(mine, torch),
                     fmt(mine.value if mine else None), fmt(torch.value if torch else None),
                     "%.0f%%" % (100 * mine.value / copy_bw) if mine and copy_bw else "—"])
    if not rows:
        return ""
    return ("## Softmax and cross-entropy (forward)\n\nGB/s counts the input read and the output written once "
            "(cross-entropy: the logits and the int64 targets read once). No target; the share of the copy "
            "bandwidth shows the headroom.\n\n" +
            table(["op", "shape", "dtype", "mixgrad ms", "PyTorch ms", "time mixgrad/PyTorch", "mixgrad GB/s",
                   "PyTorch GB/s", "mixgrad % of copy"], rows))


def amp_section(stats, copy_bw, verdicts):
    rows = bandwidth_rows(stats, {"unscale", "sgd_momentum", "adam"}, copy_bw, verdicts)
    extra = [[k[0], k[2], "—", cell(stats[("pytorch",) + k]), "—", "—",
              "%.0f%%" % (100 * stats[("pytorch",) + k].value / copy_bw) if copy_bw else "—", "—"]
             for k in ordered_keys(stats, {"sgd_momentum_foreach", "adam_foreach"})]
    if not rows and not extra:
        return ""
    notes = sorted({s.note for s in stats.values() if s.note})
    shape = next((k[2] for k in stats if k[1] == "unscale"), "?")
    return ("## GradScaler unscale and optimizer steps (GB/s)\n\n%s f32 values. Bytes counted, 4 per value: "
            "unscale reads and writes the gradient (8); SGD with momentum reads the gradient and reads and writes "
            "the parameter and the momentum buffer (20); Adam reads the gradient and reads and writes the "
            "parameter, exp_avg and exp_avg_sq (28). PyTorch 1.13's default step is foreach=False; the _foreach "
            "rows are foreach=True. Target: >= 70%% of the copy bandwidth.\n\n" % shape +
            table(BANDWIDTH_COLUMNS, rows + extra) +
            "".join("\nNote (PyTorch unscale): %s\n" % n for n in notes))


def dispatch_section(stats, verdicts):
    rows = []
    for (bench, shape, dtype, mode) in ordered_keys(stats, {"dispatch_add"}):
        mine, torch = stats.get(("mixgrad", bench, shape, dtype, mode)), stats.get(("pytorch", bench, shape, dtype, mode))
        ok = mine.value <= DISPATCH_TARGET_NS if mine else None
        verdicts.append(("dispatch %s <= 1 us" % mode, ok))
        rows.append([mode, cell(mine), cell(torch), time_ratio(mine, torch), verdict(ok)])
    if not rows:
        return ""
    return ("## Dispatcher overhead (ns per op)\n\n`add` of two 4-element f32 tensors, many in a row: mixgrad "
            "in scopes of 100 ops (the results released at each scope's end), PyTorch in a Python loop (its "
            "usual caller, interpreter included). grad=on: both inputs require grad, so every op records a "
            "node. autocast=bf16: inside `MX_AUTOCAST(MX_CPU, MX_BF16, ...)` / `torch.autocast(\"cpu\", "
            "torch.bfloat16)` (add is not cast by either). Target: <= 1 us per op.\n\n" +
            table(["mode", "mixgrad ns/op", "PyTorch ns/op", "time mixgrad/PyTorch", "target"], rows))


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def header(args, metas, threads):
    mx, pt = metas.get("mixgrad", {}), metas.get("pytorch", {})
    lines = ["# Kernel benchmarks: mixgrad and PyTorch", ""]
    if args.quick:
        lines += ["**SMOKE RUN (--quick): small shapes, few repeats, tensors that fit in cache. Not a "
                  "measurement; the numbers only show that everything runs.**", ""]
    lines += ["- date: %s; machine: %s, %d CPUs; threads: %s (OMP_NUM_THREADS)" %
              (datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), cpu_model(), os.cpu_count() or 0, threads),
              "- rounds: %d, alternating which side runs first; each cell is the median of the pooled times "
              "(± half the range, max - min, as a share of the median)" % args.rounds,
              "- time mixgrad/PyTorch: the ratio of median times; below 1, mixgrad is faster",
              "- mixgrad %s, build %s, oneDNN %s (ISA %s)" % (mx.get("version", "?"), mx.get("build", "?"),
                                                             "yes" if mx.get("onednn") else "no",
                                                             mx.get("onednn_isa", "?")),
              "- PyTorch %s, BLAS %s, CPU capability %s, mkldnn %s" % (pt.get("version", "?"), pt.get("blas", "?"),
                                                                       pt.get("cpu_capability", "?"),
                                                                       pt.get("mkldnn", "?"))]
    if pt.get("blas") == "generic":
        # Debian's torch calls whatever libblas.so.3 the alternatives system points at
        blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
        core = os.environ.get("OPENBLAS_CORETYPE")
        lines.append("- PyTorch's f32 matmul goes to the system's BLAS, here %s%s%s" % (
            blas, "" if "openblas" in blas else " (not OpenBLAS: its f32 GEMM is far from PyTorch's best, so compare "
            "mixgrad's GEMM with oneDNN's)", ", with OPENBLAS_CORETYPE=%s (set by bench/run)" % core if core else ""))
    return "\n".join(lines) + "\n\n"


def summary(verdicts):
    known = [(name, ok) for name, ok in verdicts if ok is not None]
    missed = [name for name, ok in known if not ok]
    text = "## Targets\n\n%d of %d met." % (len(known) - len(missed), len(known))
    if missed:
        text += " Missed:\n\n" + "".join("- %s\n" % name for name in missed)
    return text + "\n"


def report(args, metas, stats, threads):
    verdicts = []
    copy = copy_bandwidth(stats)
    copy_bw = copy[0] if copy else None
    emulated = {"f16"} | ({"bf16"} if metas.get("mixgrad", {}).get("bf16_ceiling") == "f32" else set())
    body = [gemm_section(stats, verdicts, emulated), conv_section(stats)]
    if copy:
        body.append("## Copy bandwidth (the baseline)\n\n%s GB/s (bytes read + written): `%s` of the elementwise "
                    "size, between buffers touched beforehand, %s.\n" %
                    (fmt(copy_bw), copy[1], "on one thread" if copy[1] == "memcpy_1t" else "split over the threads"))
    body += [elementwise_section(stats, copy_bw, verdicts), softmax_section(stats, copy_bw),
             amp_section(stats, copy_bw, verdicts), dispatch_section(stats, verdicts), pool_section(stats)]
    return header(args, metas, threads) + summary(verdicts) + "\n" + "\n".join(s for s in body if s)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "kernels"),
                    help="the C benchmark (default: build/bench/kernels)")
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with torch (default: /usr/bin/python3)")
    ap.add_argument("--rounds", type=int, help="alternating rounds (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke test: small shapes, few repeats")
    ap.add_argument("--only", help="comma-separated groups: gemm conv elementwise softmax amp dispatch pool")
    ap.add_argument("--out", default="kernels.md", help="markdown tables (default kernels.md)")
    ap.add_argument("--json", default="kernels.json", help="raw results, one JSON object per line")
    ap.add_argument("--from-json", metavar="FILE",
                    help="write --out from a --json file of an earlier run instead of running (its rounds given "
                         "by --rounds)")
    args = ap.parse_args()
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.from_json:
        metas, results = {}, []
        with open(args.from_json) as f:
            for line in f:
                obj = json.loads(line)
                if "meta" in obj:
                    metas[obj["meta"]] = obj
                else:
                    results.append(obj)
        with open(args.out, "w") as f:
            f.write(report(args, metas, pool(results), os.environ.get("OMP_NUM_THREADS", "2")))
        return
    if not os.access(args.binary, os.X_OK):
        sys.exit("run_kernels: no benchmark binary at %s (build it: ninja -C build bench/kernels, or pass "
                 "--binary)" % args.binary)
    metas, results, threads = run_all(args)
    with open(args.json, "w") as f:
        for m in metas.values():
            f.write(json.dumps(m) + "\n")
        for r in results:
            f.write(json.dumps(r) + "\n")
    with open(args.out, "w") as f:
        f.write(report(args, metas, pool(results), threads))
    print("run_kernels: wrote %s and %s" % (args.out, args.json), file=sys.stderr)


if __name__ == "__main__":
    main()
