#!/usr/bin/python3
"""Times mixgrad's collectives and data-parallel training steps side by side with raw MPI_Allreduce and with
PyTorch's (gloo, DDP), 2 ranks on this machine: bench/all_reduce (C, under scripts/launch, which measures
MPI_Allreduce and mixgrad's DDP steps without overlap too) and bench/all_reduce.py in alternating rounds (who
goes first alternates too), each call's time pooled over the rounds, and markdown tables of medians, spread and
ratios mixgrad/PyTorch and mixgrad/MPI against the targets of issue #35, and of mixgrad's DDP steps with and
without overlap. Each side runs in a scheduling group of its own (run_train.py's own_scheduling_group).
Python 3 standard library only.

    ninja -C build bench/all_reduce
    bench/run_all_reduce.py --out bench/all_reduce.md     # about three minutes on 2 cores
    bench/run_all_reduce.py --quick --out /tmp/ar.md      # a smoke test: few calls, one round
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

from run_train import own_scheduling_group, scheduling_note

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The targets of issue #35: mixgrad's all-reduce over raw MPI_Allreduce's (every size), and mixgrad's DDP
# step over PyTorch's DistributedDataParallel's.
MPI_TARGET = 1.1
DDP_TARGET = 0.8
DDP_MODELS = ["mlp", "cnn"]
OPS = ["all_reduce", "barrier"] + [f"ddp_step_{m}{v}" for m in DDP_MODELS for v in ("", "_no_overlap")]


def torch_environment(python, env, quick):
    """env for PyTorch's side, and a note on its BLAS. Debian's torch runs its float32 matmuls in whatever
    libblas.so.3 is; the reference BLAS is ~30x slower than OpenBLAS and would flatter mixgrad, so a full run
    refuses it. As bench/run does, OPENBLAS_CORETYPE names this CPU's kernels when OpenBLAS, not knowing the
    CPU's model (a VM's), falls back to its Prescott (SSE3) ones."""
    blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" not in blas:
        if not quick:
            sys.exit("run_all_reduce: PyTorch would use the reference BLAS (%s); install OpenBLAS first:\n"
                     "  sudo apt-get install libopenblas0-pthread" % blas)
        return env, "BLAS %s (not OpenBLAS: PyTorch's DDP steps are far slower than at its best)" % blas
    if env.get("OPENBLAS_CORETYPE"):
        return env, "OpenBLAS core %s (OPENBLAS_CORETYPE)" % env["OPENBLAS_CORETYPE"]
    probe = subprocess.run([python, "-c", "import torch"], env=dict(env, OPENBLAS_VERBOSE="2"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, universal_newlines=True)
    core = next((l[len("Core: "):].strip() for l in probe.stderr.splitlines() if l.startswith("Core: ")), "?")
    if core != "Prescott":
        return env, "OpenBLAS core %s" % core
    flags = set(next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), []))
    better = "SkylakeX" if {"avx512bw", "avx512vl", "avx512dq"} <= flags else "Haswell" if "avx2" in flags else None
    if not better:
        return env, "OpenBLAS core Prescott"
    return dict(env, OPENBLAS_CORETYPE=better), "OpenBLAS core %s (OPENBLAS_CORETYPE: it detected Prescott)" % better


def run_side(cmd, env):
    print(" ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, universal_newlines=True,
                          preexec_fn=own_scheduling_group)
    if proc.returncode != 0:
        sys.exit("run_all_reduce: %s failed with status %d" % (cmd[0], proc.returncode))
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def percentile(v, q):
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(v):
    """median (p10-p90) of v's times, or a dash."""
    return "%.3f (%.3f-%.3f)" % (median(v), percentile(v, 0.1), percentile(v, 0.9)) if v else "—"


def verdict(ratio, target):
    return "%s (≤ %.1f)" % ("PASS" if ratio <= target else "MISS", target)


def tables(times):
    """The main table's lines, the overlap table's, and the targets' verdicts ([(what, passed)])."""
    main = ["| op | bytes | mixgrad median ms (p10-p90) | PyTorch median ms (p10-p90) | mixgrad/PyTorch | mixgrad GB/s "
            "| PyTorch GB/s | MPI_Allreduce median ms | mixgrad/MPI | target |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for (op, size), by_impl in sorted(times.items(), key=lambda kv: (OPS.index(kv[0][0]), kv[0][1])):
        m, p, raw = by_impl.get("mixgrad", []), by_impl.get("pytorch", []), by_impl.get("mpi", [])
        bw = lambda v: "%.2f" % (size / (median(v) * 1e-3) / 1e9) if size and v else "—"
        ratio = median(m) / median(p) if m and p else None
        ratio_mpi = median(m) / median(raw) if m and raw else None
        target = "—"
        if op == "all_reduce" and ratio_mpi is not None:
            target = "mixgrad/MPI " + verdict(ratio_mpi, MPI_TARGET)
            verdicts.append(("all-reduce %s bytes within %.1fx of MPI_Allreduce" % ("{:,}".format(size), MPI_TARGET),
                             ratio_mpi <= MPI_TARGET))
        elif op in ("ddp_step_" + model for model in DDP_MODELS) and ratio is not None:
            target = "mixgrad/PyTorch " + verdict(ratio, DDP_TARGET)
            verdicts.append(("%s at most %.1f of PyTorch DDP's" % (op, DDP_TARGET), ratio <= DDP_TARGET))
        main.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            op, "{:,}".format(size) if size else "—", summary(m), summary(p), "%.2f" % ratio if ratio else "—",
            bw(m), bw(p), "%.3f" % median(raw) if raw else "—", "%.2f" % ratio_mpi if ratio_mpi else "—", target))
    overlap = ["| model | with overlap median ms (p10-p90) | without overlap median ms (p10-p90) | with/without |",
               "|---|---|---|---|"]
    for model in DDP_MODELS:
        on = times.get(("ddp_step_" + model, 0), {}).get("mixgrad", [])
        off = times.get(("ddp_step_%s_no_overlap" % model, 0), {}).get("mixgrad", [])
        overlap.append("| %s | %s | %s | %s |" % (model, summary(on), summary(off),
                                                   "%.2f" % (median(on) / median(off)) if on and off else "—"))
    return main, overlap, verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "all_reduce"))
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "all_reduce.md"))
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one thread per rank: the two ranks share the 2 cores
    torch_env, blas_note = torch_environment(args.python, env, args.quick)
    extra = ["--quick"] if args.quick else []
    sides = [([os.path.join(ROOT, "scripts", "launch"), "2", args.binary] + extra, env),
             ([args.python, os.path.join(HERE, "all_reduce.py")] + extra, torch_env)]
    rounds = 1 if args.quick else args.rounds
    times = {}
    for r in range(rounds):
        for cmd, side_env in (sides if r % 2 == 0 else sides[::-1]):
            for res in run_side(cmd, side_env):
                times.setdefault((res["op"], res["bytes"]), {}).setdefault(res["impl"], []).extend(res["times_ms"])

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE,
                            universal_newlines=True).stdout.strip()
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":!bench/all_reduce.md"], cwd=ROOT).returncode:
        commit += " with uncommitted changes"  # its own output aside
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                   stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    main_table, overlap_table, verdicts = tables(times)
    passed = sum(ok for _, ok in verdicts)
    lines = [
        "# Collectives and data-parallel steps: mixgrad vs MPI and PyTorch (gloo), 2 ranks on one machine",
        "",
        "Generated by `bench/run_all_reduce.py` on %s from commit %s%s: %s, %d cores; PyTorch %s (Debian "
        "python3-torch, gloo over TCP; %s); one thread per rank; %d alternating rounds, %s calls each pooled; each "
        "side in a scheduling group of its own (%s)."
        % (datetime.date.today().isoformat(), commit, " (a --quick smoke run: too few calls to mean anything)"
           if args.quick else "", cpu, os.cpu_count(), torch_version, blas_note, rounds,
           "5" if args.quick else "50", scheduling_note()),
        "",
        "The targets (issue #35): mixgrad's all-reduce within %.1fx of raw `MPI_Allreduce` at every size, and its "
        "DDP step at most %.1f of PyTorch DDP's; the `target` column says PASS or MISS for each row they cover. "
        "Met: %d of %d%s."
        % (MPI_TARGET, DDP_TARGET, passed, len(verdicts),
           "" if passed == len(verdicts) else " (missed: %s)" % "; ".join(w for w, ok in verdicts if not ok)),
        "",
        "all_reduce sums float32 tensors (2.6 MiB: the MNIST MLP's gradients); bandwidth is the tensor's bytes "
        "over the median time; MPI_Allreduce is the engine alone on the same buffer, in the same program as "
        "mixgrad's. ddp_step_mlp and ddp_step_cnn are training steps of the MNIST MLP and CNN "
        "(bench/train_step's models, SGD with momentum for both), a batch of 128 split 64 per rank: both "
        "mixgrad (mx_ddp_average_gradients) and PyTorch's DistributedDataParallel all-reduce buckets of the "
        "gradients during backward. The _no_overlap rows are mixgrad's same steps with the gradients averaged "
        "after backward instead, in one all-reduce of one packed buffer. Ratios are mixgrad/PyTorch and "
        "mixgrad/MPI (below 1: mixgrad is faster).",
        "",
    ] + main_table + [
        "",
        "## Overlap",
        "",
        "mixgrad's DDP step with each bucket's all-reduce started from backward's hooks, against the same step "
        "averaging after backward (below 1: the overlap saves time).",
        "",
    ] + overlap_table
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
