#!/usr/bin/env python3
"""scripts/gpu-check's driver on a GPU machine: tests/gpu, the GPU suite under
compute-sanitizer, and the training steps beside PyTorch's, alternating,
written to bench/GPU.md (issue #32, item 1).

    scripts/gpu-check                       # sets the library path and runs this
    python3 bench/run_gpu.py --bundle build-gpu/carry --out bench/GPU.md [--quick] [--budget S]
    python3 bench/run_gpu.py --bundle build-gpu/carry --device cpu --quick --out /tmp/GPU.md  # a smoke run

The steps run in the order of their value, each under a timeout cut from one
wall-clock budget (default 450 s, inside the issue's 8 minutes): machine
facts, tests/gpu, the timings (both sides with mixgrad's cuDNN numerics:
float32 convolutions in exact float32, deterministic algorithms), a 4096
matrix product against torch.matmul (bench/gemm_step.c and .py), loss
scaling's share of the f16 ResNet-9 step (mixgrad's steps with and without
its GradScaler, alternating in one process), cuDNN's ranking of its
algorithms (bench/cudnn_rank) and the host's time to queue each kind of
call (bench/cuda_host_cost), a second, smaller table of the
convolutional models in float32 with PyTorch's cuDNN defaults on both sides
(TF32, any algorithm) and one of ResNet-9 in float32 with cuDNN's
benchmarking on both sides (each skipped when the budget left is short of
the sanitizers' share), then memcheck over the whole GPU suite, then
racecheck over the tests of the kernels that share memory within a block
(reductions, softmax, batch norm, the AMP unscale). A step the budget cannot
fit is written down as skipped. GPU.md is rewritten after every step and
copied to $OUT when that is set, so a run cut short still reports what it
did. Only the standard library is used; PyTorch runs in its own processes
(bench/train_step.py), with the Python that runs this script by default.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# "-cl": the batch (and PyTorch's weights) channels-last, cuDNN's NHWC kernels (issue #32, item 5)
CONFIGS = [("mlp", 128), ("cnn", 128), ("resnet9", 64), ("resnet9-cl", 64)]
AMPS = ["off", "bf16", "f16"]
# The convolutional models in float32 again, with PyTorch's cuDNN defaults on both sides (TF32 allowed,
# non-deterministic algorithms): how the steps compare where PyTorch's users usually run them.
PYTORCH_NUMERICS_CONFIGS = [("cnn", "off", 128), ("resnet9", "off", 64)]
PYTORCH_NUMERICS_FLAGS = ["--cudnn-tf32", "--cudnn-nondeterministic"]
# ResNet-9 in float32 again, each side's algorithms chosen by timing them (torch.backends.cudnn.benchmark,
# mx_set_cudnn_benchmark) under the exact numerics: whether the float32 gap is cuDNN's heuristics' choice.
BENCHMARK_CONFIGS = [("resnet9", "off", 64), ("resnet9-cl", "off", 64)]
BENCHMARK_FLAGS = ["--cudnn-benchmark"]
STEP_TARGET = 1.0  # mixgrad/PyTorch step time, every model and precision (issue #32, item 6)
GEMM_TARGET = 0.95  # mixgrad's matrix product speed over torch.matmul's at 4096 (issue #32, item 6)
SCALER_TARGET = 0.02  # loss scaling's share of the ResNet-9 step (issue #32, item 6)
SCALER_CONFIG = ("resnet9", "f16", 64)
# racecheck's tests: the kernels whose threads share memory within a block
RACECHECK_FILTERS = ["gpu/reduce*", "gpu/softmax*", "gpu/amp_unscale*", "gpu/batch_norm*"]  # the slowest last


class Budget:
    """One wall-clock budget shared by the steps."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def timeout(self, cap, reserve=0.0):
        """Seconds a step may take: its cap, less what later steps need; None when under 10."""
        t = min(cap, self.left() - reserve)
        return t if t >= 10 else None


def run(cmd, timeout, env=None):
    """(exit code or 'timeout', combined output, seconds) of cmd."""
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout)
        return p.returncode, p.stdout, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "timeout", out, time.monotonic() - start
    except OSError as e:
        return "not run", str(e), time.monotonic() - start


def mixgrad_env():
    """The environment of mixgrad's processes: the bundle's and CUDA's libraries first."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    path = os.environ.get("MX_GPU_CHECK_LIBRARY_PATH", "")
    if path:
        env["LD_LIBRARY_PATH"] = path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


# --- the machine ------------------------------------------------------------------------------

def first_line(cmd):
    code, out, _ = run(cmd, 30)
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    return lines[0] if code == 0 and lines else None


def machine_facts(args):
    facts = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "host": platform.node()}
    smi = first_line(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                      "--format=csv,noheader"])
    facts["gpu"] = smi or "none found (nvidia-smi did not answer)"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    code, out, _ = run([nvcc, "--version"], 30)
    facts["nvcc"] = out.strip().splitlines()[-1] if code == 0 and out.strip() else "not found"
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    facts["cpu"] = f"{model}, {os.cpu_count()} cores"
    probe = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
             "'cudnn': torch.backends.cudnn.version(), 'gpu': torch.cuda.get_device_name(0) "
             "if torch.cuda.is_available() else None}))")
    code, out, _ = run([args.python, "-c", probe], 120)
    try:
        facts["pytorch"] = json.loads(out.strip().splitlines()[-1]) if code == 0 else {"error": out.strip()[-300:]}
    except (ValueError, IndexError):
        facts["pytorch"] = {"error": out.strip()[-300:]}
    try:
        with open(os.path.join(args.bundle, "build.json")) as f:
            facts["build"] = json.load(f)
    except (OSError, ValueError) as e:
        facts["build"] = {"error": str(e)}
    return facts


# --- the tests ---------------------------------------------------------------------------------

SYNTHESIS = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def criterion_summary(code, out, seconds):
    """What a Criterion run says: its counts, failed and skipped tests, and its last lines."""
    text = ANSI.sub("", out)
    m = SYNTHESIS.findall(text)
    tested, passing, failing, crashing = (int(x) for x in m[-1]) if m else (0, 0, 0, 0)
    failed = sorted(set(re.findall(r"\[FAIL\] (\S+): ", text)))
    skipped = sorted(set(re.findall(r"\[SKIP\] (\S+): ", text)))
    return {"exit": code, "seconds": round(seconds, 1), "tested": tested, "passing": passing, "failing": failing,
            "crashing": crashing, "failed": failed, "skipped_tests": len(skipped), "counted": bool(m),
            "tail": text.strip().splitlines()[-15:]}


# The GPU suite's programs: test_gpu (which the sanitizers run too), then batch norm's statistics at ResNet-9's
# sizes, too large for the sanitizers' share of the budget.
GPU_TEST_PROGRAMS = ("test_gpu", "test_gpu_bn_stats")


def gpu_tests(args, budget, log):
    """The GPU suite's programs in the bundle, one summary: counts added, the failing program's tail."""
    summary = None
    for name in GPU_TEST_PROGRAMS:
        exe = os.path.join(args.bundle, "bin", name)
        if summary is not None and not os.path.exists(exe):
            continue
        timeout = budget.timeout(180, reserve=args.bench_reserve)
        if timeout is None:
            return summary or {"skipped": "out of time"}
        code, out, secs = run([exe, "--verbose", "--jobs", "1"], timeout, env=mixgrad_env())
        log("tests.log", out, append=True)
        s = criterion_summary(code, out, secs)
        if summary is None:
            summary = s
            continue
        for key in ("seconds", "tested", "passing", "failing", "crashing", "skipped_tests"):
            summary[key] += s[key]
        summary["failed"] += s["failed"]
        summary["counted"] = summary["counted"] and s["counted"]
        if s["exit"] != 0 or not s["counted"]:
            summary["exit"], summary["tail"] = s["exit"], s["tail"]
    return summary


def sanitizer(args, budget, log, tool, filters, cap):
    """compute-sanitizer's tool over the GPU suite (or the tests matching filters), one run per filter."""
    if args.device != "cuda":
        return {"skipped": "no GPU (--device cpu)"}
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    runs = []
    cap_end = time.monotonic() + cap
    for i, f in enumerate(filters):
        # an even share of what is left: a filter that ends early leaves its time to the next
        timeout = budget.timeout((cap_end - time.monotonic()) / (len(filters) - i))
        if timeout is None:
            runs.append({"filter": f or "all", "skipped": "out of time"})
            continue
        cmd = [exe, "--tool", tool, "--target-processes", "all", "--error-exitcode", "9"]
        cmd += ["--leak-check", "full"] if tool == "memcheck" else ["--racecheck-report", "all"]
        cmd += [os.path.join(args.bundle, "bin", "test_gpu"), "--jobs", "1"] + (["--filter", f] if f else [])
        code, out, secs = run(cmd, timeout, env=mixgrad_env())
        log(f"{tool}.log", out, append=True)
        errors = [int(n) for n in re.findall(r"ERROR SUMMARY: (\d+) error", out)]
        hazards = re.findall(r"RACECHECK SUMMARY: (\d+) hazard", out)
        s = criterion_summary(code, out, secs)
        runs.append({"filter": f or "all", "exit": code, "seconds": s["seconds"], "processes": len(errors),
                     "errors": sum(errors), "hazards": sum(int(h) for h in hazards),
                     "tests": f"{s['passing']}/{s['tested']}", "tail": s["tail"][-6:]})
    return {"runs": runs}


# --- the training steps ---------------------------------------------------------------------------

def step_command(args, impl, model, amp, batch, numerics=()):
    layout = ["--channels-last"] if model.endswith("-cl") else []
    flags = layout + list(numerics) + ["--model", model.removesuffix("-cl"), "--amp", amp, "--batch", str(batch),
                                       "--device", args.device, "--warmup", str(args.warmup),
                                       "--repeat", str(args.repeat), "--seconds", str(args.seconds)]
    if impl == "mixgrad":
        return [os.path.join(args.bundle, "bin", "train_step")] + flags
    return [args.python, os.path.join(HERE, "train_step.py")] + flags


def one_step_run(args, impl, cfg, timeout, log, numerics=()):
    model, amp, batch = cfg
    env = mixgrad_env() if impl == "mixgrad" else dict(os.environ, OMP_NUM_THREADS="2")
    code, out, _ = run(step_command(args, impl, model, amp, batch, numerics), timeout, env=env)
    log("bench.log", f"$ {impl} {model} {amp} {batch} {' '.join(numerics)}: exit {code}\n{out}\n", append=True)
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"error": f"exit {code}: " + " | ".join(out.strip().splitlines()[-3:])}


def numerics_mismatch(res, numerics):
    """What a step's JSON line says of its cuDNN settings where they are not those asked for, else None."""
    want = {"cudnn_tf32": "--cudnn-tf32" in numerics, "cudnn_deterministic": "--cudnn-nondeterministic" not in numerics,
            "cudnn_benchmark": "--cudnn-benchmark" in numerics}
    got = {k: res.get(k) for k in want}
    return None if got == want else f"cuDNN settings {got}, expected {want}"


def bench(args, budget, log, configs=None, numerics=(), reserve_first_round=False):
    """Rounds of every configuration, mixgrad and PyTorch in alternating order; rounds outermost.
    numerics: train_step's cuDNN flags, on both sides. reserve_first_round: the sanitizers' reserve is kept
    from the first round on (else from the second), so a later, optional table never eats into it."""
    configs = configs or [(m, a, b) for m, b in CONFIGS for a in AMPS]
    results = {c: {"mixgrad": [], "pytorch": [], "host": {"mixgrad": [], "pytorch": []}, "errors": [],
                   "notes": set()} for c in configs}
    rounds_done = 0
    for r in range(args.rounds):
        # a quick run's one round leaves the sanitizers their share too, process by process
        keep = args.sanitizer_reserve if r > 0 or reserve_first_round or args.quick else 0
        # a round needs about 2 processes per configuration; keep what later steps need
        if budget.left() - keep < len(configs) * 2 * 8 and (r > 0 or reserve_first_round):
            break
        for c in configs:
            for impl in (["mixgrad", "pytorch"] if r % 2 == 0 else ["pytorch", "mixgrad"]):
                timeout = budget.timeout(90, reserve=keep)
                if timeout is None:
                    results[c]["errors"].append(f"{impl}: out of time")
                    continue
                res = one_step_run(args, impl, c, timeout, log, numerics)
                mismatch = numerics_mismatch(res, numerics) if "times_ms" in res else None
                if mismatch:
                    results[c]["errors"].append(f"{impl}: {mismatch}; its times left out")
                elif "times_ms" in res:
                    results[c][impl].extend(res["times_ms"])
                    results[c]["host"][impl].extend(res.get("host_ms", []))
                    if impl == "pytorch":
                        results[c]["notes"].add(f"PyTorch {res.get('version', '?')}")
                elif "skipped" in res:
                    results[c]["notes"].add(f"{impl}: {res['skipped']}")
                else:
                    results[c]["errors"].append(f"{impl}: {res.get('error', '?')}")
        rounds_done += 1
    return {"rounds": rounds_done, "results": results}


def gemm(args, budget, log):
    """The matrix product at 4096 (256 on --device cpu), mixgrad's and torch.matmul's, in alternating rounds."""
    n = 4096 if args.device == "cuda" else 256
    rounds = 1 if args.quick else 2
    results = {d: {"mixgrad": [], "pytorch": [], "errors": []} for d in ("f32", "bf16", "f16")}
    for r in range(rounds):
        for dtype, res in results.items():
            for impl in (["mixgrad", "pytorch"] if r % 2 == 0 else ["pytorch", "mixgrad"]):
                timeout = budget.timeout(60, reserve=args.sanitizer_reserve)
                if timeout is None:
                    res["errors"].append(f"{impl}: out of time")
                    continue
                flags = ["--device", args.device, "--n", str(n), "--dtype", dtype, "--warmup", "3", "--repeat",
                         "5" if args.quick else "10", "--calls", "5"]
                cmd = ([os.path.join(args.bundle, "bin", "gemm_step")] if impl == "mixgrad" else
                       [args.python, os.path.join(HERE, "gemm_step.py")]) + flags
                code, out, _ = run(cmd, timeout, env=mixgrad_env() if impl == "mixgrad" else None)
                log("gemm.log", f"$ {' '.join(cmd)}: exit {code}\n{out}\n", append=True)
                line = next((l for l in reversed(out.splitlines()) if l.startswith("{")), None)
                try:
                    res[impl].extend(json.loads(line)["times_ms"])
                except (TypeError, ValueError, KeyError):
                    res["errors"].append(f"{impl}: exit {code}: " + " | ".join(out.strip().splitlines()[-2:]))
    return {"n": n, "rounds": rounds, "results": results}


def diagnostic(args, budget, log, name, keep):
    """A bundled GPU diagnostic (a few seconds), its output logged to $OUT/<name>.log: its exit, the lines for
    which keep(line) holds, and its last lines."""
    exe = os.path.join(args.bundle, "bin", name)
    if args.device != "cuda":
        return {"skipped": "not on a GPU"}
    if not os.path.exists(exe):
        return {"skipped": "not in the bundle"}
    timeout = budget.timeout(30, reserve=args.sanitizer_reserve)
    if timeout is None:
        return {"skipped": "out of time"}
    code, out, secs = run([exe], timeout, env=mixgrad_env())
    log(f"{name}.log", out)
    return {"code": code, "lines": [l.strip() for l in out.splitlines() if keep(l)], "seconds": secs,
            "tail": out.strip().splitlines()[-3:]}


def cudnn_ranking(args, budget, log):
    """bench/cudnn_rank: cuDNN's float32 picks for ResNet-9's convolutions against the fastest, and the host's
    time to queue one convolution call."""
    return diagnostic(args, budget, log, "cudnn_rank", lambda l: "totals" in l or l.startswith("host:"))


def host_costs(args, budget, log):
    """bench/cuda_host_cost: the host's microseconds to queue one call, raw CUDA's and mixgrad's ops': where a
    host-bound step's time goes."""
    return diagnostic(args, budget, log, "cuda_host_cost", lambda l: l.startswith("host:"))


def scaler_share(args, budget, log):
    """mixgrad's f16 ResNet-9 step with its GradScaler and without, alternating step by step in one process
    (train_step --scaler-share): one process's median step can differ from the next one's by 30% on a GPU
    machine, so only steps of the same process compare."""
    model, amp, batch = SCALER_CONFIG
    times = {"with": [], "without": [], "paired": []}
    errors = []
    for _ in range(1 if args.quick else 2):
        timeout = budget.timeout(90, reserve=args.sanitizer_reserve)
        if timeout is None:
            errors.append("out of time")
            continue
        cmd = step_command(args, "mixgrad", model, amp, batch) + ["--scaler-share"]
        code, out, _ = run(cmd, timeout, env=mixgrad_env())
        log("scaler.log", f"$ {' '.join(cmd)}: exit {code}\n{out}\n", append=True)
        line = next((l for l in reversed(out.splitlines()) if l.startswith("{")), None)
        try:
            res = json.loads(line)
            if res.get("scaler") is not True:
                raise ValueError(f"scaler {res.get('scaler')}")
            w, wo = res["times_ms"], res["times_without_scaler_ms"]
            times["with"] += w
            times["without"] += wo
            times["paired"] += [a - b for a, b in zip(w, wo)]
        except (TypeError, ValueError, KeyError) as e:
            errors.append(f"exit {code}: {e}")
    return {"times": times, "errors": errors}


def stats(times):
    if not times:
        return None
    q = statistics.quantiles(times, n=10) if len(times) >= 2 else [times[0]] * 9
    return {"median": statistics.median(times), "p10": q[0], "p90": q[-1], "n": len(times)}


# --- the report ------------------------------------------------------------------------------------

def fmt_ms(s):
    return f"{s['median']:.3f} ({s['p10']:.3f}-{s['p90']:.3f})" if s else "-"


def fmt_median(s):
    return f"{s['median']:.3f}" if s else "-"


PYTORCH_NUMERICS_TEXT = (
    "## float32 convolutions with PyTorch's cuDNN defaults, on both sides",
    "The table above runs both sides with mixgrad's cuDNN numerics. Here the CNN and ResNet-9 float32 steps run "
    f"with `{' '.join(PYTORCH_NUMERICS_FLAGS)}` on both: `torch.backends.cudnn.allow_tf32 = True` and "
    "`torch.backends.cudnn.deterministic = False` (PyTorch's defaults) against `mx_set_cudnn_allow_tf32(true)` "
    "and `mx_set_cudnn_deterministic(false)`: TF32 tensor cores for float32 convolutions, and the first "
    "algorithm cuDNN ranks, deterministic or not. Matrix products stay float32 on both sides.")
BENCHMARK_TEXT = (
    "## ResNet-9 in float32 with cuDNN's algorithms timed, on both sides",
    "The first table's numerics (exact float32, deterministic algorithms), with `--cudnn-benchmark` on both: "
    "`torch.backends.cudnn.benchmark = True` against `mx_set_cudnn_benchmark(true)`, each geometry's algorithms "
    "timed in the warm-up and the fastest allowed kept, where the first table takes cuDNN's heuristics' choice "
    "(PyTorch: its v8 frontend's; mixgrad: the legacy API's). Off by default on both sides.")


def optional_section(args, extra, text):
    """A later float32 table under other cuDNN settings on both sides; text: its title and what it runs."""
    out = [text[0], "", text[1], ""]
    if extra is None:
        return out + ["Not reached.", ""]
    if not extra["rounds"]:
        return out + ["Skipped: the budget left after the table above was short (it keeps the sanitizers' share).",
                      ""]
    out += [f"{extra['rounds']} alternating round(s), as above.", "",
            "| model | batch | amp | mixgrad ms | PyTorch ms | mixgrad/PyTorch | target |",
            "|---|---|---|---|---|---|---|"]
    notes = set()
    for (model, amp, batch), r in extra["results"].items():
        m, p = stats(r["mixgrad"]), stats(r["pytorch"])
        ratio = m["median"] / p["median"] if m and p else None
        verdict = "" if ratio is None else ("PASS" if ratio <= STEP_TARGET else "MISS")
        out.append(f"| {model} | {batch} | {amp} | {fmt_ms(m)} | {fmt_ms(p)} | "
                   f"{'-' if ratio is None else f'{ratio:.2f}'} | {verdict} |")
        notes |= {f"{model} {amp}: {e}" for e in r["errors"]}
    if notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in sorted(notes)]
    return out + [""]


def gemm_section(args, g):
    out = ["## The matrix product against torch.matmul", ""]
    if g is None:
        return out + ["Not reached.", ""]
    out += [f"`bench/gemm_step` against `bench/gemm_step.py`, ({g['n']}, {g['n']}) times ({g['n']}, {g['n']}), "
            f"{g['rounds']} alternating round(s), each sample 5 products then a synchronisation. Milliseconds a "
            f"product: median (p10-p90). Target (issue #32): mixgrad's speed at least {GEMM_TARGET} of torch's. "
            "float32 without TF32 on both sides.", "",
            "| dtype | mixgrad ms | PyTorch ms | mixgrad TFLOP/s | PyTorch TFLOP/s | speed vs PyTorch | target |",
            "|---|---|---|---|---|---|---|"]
    notes = []
    for dtype, r in g["results"].items():
        m, p = stats(r["mixgrad"]), stats(r["pytorch"])
        tf = lambda s: f"{2.0 * g['n'] ** 3 / (s['median'] * 1e-3) / 1e12:.1f}" if s else "-"
        speed = p["median"] / m["median"] if m and p else None
        verdict = "" if speed is None else ("PASS" if speed >= GEMM_TARGET else "MISS")
        out.append(f"| {dtype} | {fmt_ms(m)} | {fmt_ms(p)} | {tf(m)} | {tf(p)} | "
                   f"{'-' if speed is None else f'{speed:.2f}'} | {verdict} |")
        notes += [f"{dtype}: {e}" for e in r["errors"]]
    if notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return out + [""]


def diagnostic_section(title, r, what):
    """A diagnostic's section: what it measures (what), its exit and time, and its kept lines (or its last ones)."""
    out = [f"## {title}", ""]
    if r is None:
        return out + ["Not reached.", ""]
    if "skipped" in r:
        return out + [f"Skipped: {r['skipped']}.", ""]
    out += [f"{what} Exit {r['code']}, {r['seconds']:.1f} s.", ""]
    lines = r["lines"] or [f"no result: {' | '.join(r['tail'])}"]
    return out + [f"- {l}" for l in lines] + [""]


def cudnn_rank_section(r):
    return diagnostic_section(
        "cuDNN's float32 algorithms", r,
        "`bench/cudnn_rank` (its whole output in `$OUT/cudnn_rank.log`): for one of each of ResNet-9's float32 "
        "convolutions at batch 64, in each direction, the time of the legacy heuristics' first deterministic pick "
        "under FMA math (what mixgrad took before it preferred Winograd: `kernels/conv_cudnn_case.h`), of the "
        "DEFAULT math list's pick, and of the fastest deterministic algorithm, summed; then the host's time to "
        "queue one call.")


def host_cost_section(r):
    return diagnostic_section(
        "The host's time a call", r,
        "`bench/cuda_host_cost` (its output in `$OUT/cuda_host_cost.log`): the median over 20 batches of 100 calls "
        "queued without waiting of the host's microseconds a call; raw CUDA calls first, then mixgrad's ops on "
        "small operands, each in a scope of its own.")


def scaler_section(sc):
    model, amp, batch = SCALER_CONFIG
    out = ["## Loss scaling's share of the step", ""]
    if sc is None:
        return out + ["Not reached.", ""]
    w, wo = stats(sc["times"]["with"]), stats(sc["times"]["without"])
    diff = statistics.median(sc["times"]["paired"]) if sc["times"]["paired"] else None
    out += [f"mixgrad's {model} {amp} step (batch {batch}) with its GradScaler (scale, unscale with the inf check, "
            "update, the step skipped on the device) and without, alternating step by step in one process "
            "(`train_step --scaler-share`). The share is the median of the paired differences (each step with the "
            "scaler less the step next to it without) over the median step with it. Target (issue #32): "
            f"under {SCALER_TARGET:.0%} of the step.", "",
            "| with ms | without ms | share | target |", "|---|---|---|---|"]
    share = diff / w["median"] if w and diff is not None else None
    verdict = "" if share is None else ("PASS" if share < SCALER_TARGET else "MISS")
    out.append(f"| {fmt_ms(w)} | {fmt_ms(wo)} | {'-' if share is None else f'{share:.1%}'} | {verdict} |")
    if sc["errors"]:
        out += ["", "Notes:", ""] + [f"- {e}" for e in sc["errors"]]
    return out + [""]


def report(args, facts, tests, timing, memcheck, racecheck, elapsed, extra=None, gemm_result=None, scaler=None,
           benchmark=None, ranking=None, host_cost=None):
    pt = facts.get("pytorch", {})
    b = facts.get("build", {})
    out = ["# mixgrad on a GPU: `scripts/gpu-check`", "",
           "Written by `scripts/gpu-check` (bench/run_gpu.py); rerun it on a lent GPU and commit what it writes.", "",
           "## The machine", "",
           "| | |", "|---|---|",
           f"| date | {facts['date']} |",
           f"| GPU (name, driver, memory, max SM clock) | {facts['gpu']} |",
           f"| host CPU | {facts['cpu']} |",
           f"| CUDA compiler there | {facts['nvcc']} |",
           f"| PyTorch | {pt.get('torch', pt.get('error', '?'))} (CUDA {pt.get('cuda', '?')}, cuDNN {pt.get('cudnn', '?')}) |",
           f"| mixgrad | commit {b.get('commit', '?')}, built {b.get('built', '?')} on {b.get('host', '?')} "
           f"({b.get('compiler', '?')}; {b.get('nvcc', '?')}; oneDNN off) |",
           f"| this run | {elapsed:.0f} s, device `{args.device}`, {'quick' if args.quick else 'full'} |", ""]

    out += ["## tests/gpu", ""]
    if "skipped" in tests:
        out += [f"Skipped: {tests['skipped']}.", ""]
    else:
        verdict = "PASS" if tests["counted"] and tests["failing"] + tests["crashing"] == 0 else "FAIL"
        if verdict == "PASS" and tests["skipped_tests"] and args.device == "cuda":
            verdict = "INCOMPLETE (tests skipped on a GPU machine: did the CUDA backend load?)"
        out += [f"**{verdict}**: {tests['passing']} of {tests['tested']} passed, {tests['failing']} failed, "
                f"{tests['crashing']} crashed, {tests['skipped_tests']} skipped (exit {tests['exit']}, "
                f"{tests['seconds']} s).", ""]
        if tests["failed"]:
            out += ["Failed: " + ", ".join(f"`{t}`" for t in tests["failed"]), ""]
        if verdict == "FAIL" or not tests["counted"]:
            out += ["```"] + tests["tail"] + ["```", ""]

    for title, res in (("compute-sanitizer memcheck (leak check on), the whole GPU suite", memcheck),
                       ("compute-sanitizer racecheck, the block-shared kernels' tests", racecheck)):
        out += [f"## {title}", ""]
        if res is None or "skipped" in res:
            out += [f"Skipped: {(res or {}).get('skipped', 'not reached')}.", ""]
            continue
        out += ["| tests | exit | processes | errors | hazards | tests passed | seconds |", "|---|---|---|---|---|---|---|"]
        for r in res["runs"]:
            if "skipped" in r:
                out.append(f"| `{r['filter']}` | skipped: {r['skipped']} | | | | | |")
            else:
                out.append(f"| `{r['filter']}` | {r['exit']} | {r['processes']} | {r['errors']} | {r['hazards']} | "
                           f"{r['tests']} | {r['seconds']} |")
        bad = [r for r in res["runs"] if r.get("exit") not in (0, None) or r.get("errors")]
        for r in bad:
            out += ["", f"`{r['filter']}`, last lines:", "```"] + r["tail"] + ["```"]
        out.append("")

    out += ["## Training steps beside PyTorch's", ""]
    if timing is None:
        out += ["Not reached.", ""]
    else:
        out += [f"`bench/train_step --device {args.device}` against `bench/train_step.py --device {args.device}`, "
                f"{timing['rounds']} alternating round(s), each process {args.warmup} warm-up and up to "
                f"{args.repeat} timed steps (at most {args.seconds} s); every step ends with a device "
                "synchronisation. Milliseconds: median (p10-p90) of the pooled steps. Target (issue #32): "
                f"mixgrad/PyTorch <= {STEP_TARGET}. Both sides run mixgrad's cuDNN numerics: float32 convolutions "
                "in exact float32 (no TF32) and deterministic algorithms only (`torch.backends.cudnn.allow_tf32 = "
                "False`, `deterministic = True`; the next table has PyTorch's defaults). Host ms: the median time "
                "a step took to be queued, before its closing synchronisation (`host_ms`): near the step's own, "
                "the host bounds the step (or a synchronisation inside it waits for the device); well below it, "
                "the device does.", "",
                "| model | batch | amp | mixgrad ms | PyTorch ms | mixgrad/PyTorch | target | mixgrad host ms | "
                "PyTorch host ms |",
                "|---|---|---|---|---|---|---|---|---|"]
        med = {}
        notes = set()
        for (model, amp, batch), r in timing["results"].items():
            m, p = stats(r["mixgrad"]), stats(r["pytorch"])
            med[(model, amp)] = (m and m["median"], p and p["median"])
            ratio = m["median"] / p["median"] if m and p else None
            verdict = "" if ratio is None else ("PASS" if ratio <= STEP_TARGET else "MISS")
            host = [fmt_median(stats(r["host"][impl])) for impl in ("mixgrad", "pytorch")]
            out.append(f"| {model} | {batch} | {amp} | {fmt_ms(m)} | {fmt_ms(p)} | "
                       f"{'-' if ratio is None else f'{ratio:.2f}'} | {verdict} | {host[0]} | {host[1]} |")
            notes |= r["notes"]
            for e in r["errors"]:
                notes.add(f"{model} {amp}: {e}")
        out += ["", "The fp32/bf16 step-time ratio (the speed bf16 gains; target: mixgrad's at least PyTorch's):", "",
                "| model | mixgrad fp32/bf16 | PyTorch fp32/bf16 | target |", "|---|---|---|---|"]
        for model, _ in CONFIGS:
            (mf, pf), (mb, pb) = med.get((model, "off"), (None, None)), med.get((model, "bf16"), (None, None))
            mr = mf / mb if mf and mb else None
            pr = pf / pb if pf and pb else None
            verdict = "" if mr is None or pr is None else ("PASS" if mr >= pr else "MISS")
            out.append(f"| {model} | {'-' if mr is None else f'{mr:.2f}'} | {'-' if pr is None else f'{pr:.2f}'} | "
                       f"{verdict} |")
        if notes:
            out += ["", "Notes:", ""] + [f"- {n}" for n in sorted(notes)]
        out.append("")
        out += optional_section(args, benchmark, BENCHMARK_TEXT)
        out += optional_section(args, extra, PYTORCH_NUMERICS_TEXT)
    out += gemm_section(args, gemm_result)
    out += scaler_section(scaler)
    out += cudnn_rank_section(ranking)
    out += host_cost_section(host_cost)
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description="tests/gpu, compute-sanitizer and the GPU training steps, to GPU.md")
    p.add_argument("--bundle", default="build-gpu/carry", help="what scripts/gpu-check --prepare built")
    p.add_argument("--out", default=os.path.join(HERE, "GPU.md"))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run of this script")
    p.add_argument("--python", default=sys.executable, help="the Python that has PyTorch")
    p.add_argument("--budget", type=float, default=450, help="wall-clock seconds for everything (default 450)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeat", type=int, default=60)
    p.add_argument("--seconds", type=int, default=4, help="cap on each process's timed steps")
    p.add_argument("--quick", action="store_true", help="1 round, 2 warm-up and 5 timed steps")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.warmup, args.repeat, args.seconds = 1, 2, 5, 2
    args.bench_reserve = 150 if args.quick else 240  # what the timings need after the tests
    args.sanitizer_reserve = 0 if args.device != "cuda" else 100  # kept for the sanitizer after round 1
    start = time.monotonic()
    budget = Budget(args.budget)
    out_dir = os.environ.get("OUT")
    logs = {}

    def log(name, text, append=False):
        logs[name] = (logs.get(name, "") if append else "") + text
        if out_dir:
            with open(os.path.join(out_dir, name), "w") as f:
                f.write(logs[name])

    state = {"tests": {"skipped": "not reached"}, "timing": None, "extra": None, "memcheck": None, "racecheck": None,
             "gemm": None, "scaler": None, "benchmark": None, "ranking": None, "host": None}
    facts = machine_facts(args)

    def write():
        text = report(args, facts, state["tests"], state["timing"], state["memcheck"], state["racecheck"],
                      time.monotonic() - start, state["extra"], state["gemm"], state["scaler"], state["benchmark"],
                      state["ranking"], state["host"])
        with open(args.out, "w") as f:
            f.write(text)
        if out_dir:
            shutil.copy(args.out, os.path.join(out_dir, "GPU.md"))
        return text

    print(f"gpu-check: {facts['gpu']}; PyTorch {facts['pytorch'].get('torch', '?')}", flush=True)
    write()
    state["tests"] = gpu_tests(args, budget, log)
    print(f"gpu-check: tests/gpu: {state['tests']}", flush=True)
    write()
    state["timing"] = bench(args, budget, log)
    write()
    state["gemm"] = gemm(args, budget, log)
    write()
    state["scaler"] = scaler_share(args, budget, log)
    write()
    state["ranking"] = cudnn_ranking(args, budget, log)
    write()
    state["host"] = host_costs(args, budget, log)
    write()
    # optional: the float32 tables with cuDNN's benchmarking and with PyTorch's cuDNN defaults, only from what
    # the sanitizers leave
    state["benchmark"] = bench(args, budget, log, BENCHMARK_CONFIGS, BENCHMARK_FLAGS, reserve_first_round=True)
    write()
    state["extra"] = bench(args, budget, log, PYTORCH_NUMERICS_CONFIGS, PYTORCH_NUMERICS_FLAGS,
                           reserve_first_round=True)
    write()
    state["memcheck"] = sanitizer(args, budget, log, "memcheck", [None], cap=max(budget.left() * 0.6, 10))
    write()
    state["racecheck"] = sanitizer(args, budget, log, "racecheck", RACECHECK_FILTERS, cap=budget.left())
    print(write())
    t = state["tests"]
    ok = "skipped" not in t and t["counted"] and t["failing"] + t["crashing"] == 0
    return 0 if ok and not (t["skipped_tests"] and args.device == "cuda") else 1


if __name__ == "__main__":
    sys.exit(main())
