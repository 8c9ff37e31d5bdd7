"""Kernel benchmarks, PyTorch's side: the twin of bench/kernels.c, measuring the same shapes with the
same repeat rule and printing the same one-line JSON results with "impl":"pytorch".

    /usr/bin/python3 bench/kernels.py [--quick] [--only GROUP,...]

Groups: gemm conv elementwise softmax amp dispatch pool. Threads: OMP_NUM_THREADS (default 2). What
kernels.c says about each measurement holds here; where PyTorch 1.13 has no CPU kernel for something,
the line says so in "note" or the measurement is left out.
"""
import argparse
import json
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

GROUPS = ("gemm", "conv", "elementwise", "softmax", "amp", "dispatch", "pool")

# The repeat rule of kernels.c: after the warmup, as many calls as fit in the budget at the warmup's
# pace, within [min_repeats, max_repeats].
cfg = {"quick": False, "budget_ms": 1000.0, "min_repeats": 3, "max_repeats": 50}


def timed_call(body, setup):
    if setup:
        setup()
    t0 = time.perf_counter()
    body()
    return (time.perf_counter() - t0) * 1e3


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def emit(bench, shape, dtype, metric, work, times, mode=None, note=None):
    m = median(times)
    value = m * 1e6 / work if metric == "ns/op" else work / (m * 1e-3) / 1e9
    line = {"impl": "pytorch", "bench": bench, "shape": shape, "dtype": dtype}
    if mode:
        line["mode"] = mode
    line.update(threads=torch.get_num_threads(), times_ms=[float("%.6g" % t) for t in times], metric=metric,
                work=work, value=float("%.6g" % value))
    if note:
        line["note"] = note
    print(json.dumps(line, separators=(",", ":")), flush=True)


def measure(bench, shape, dtype, metric, work, body, warmup, setup=None, mode=None, note=None):
    last = 0.0
    for _ in range(warmup):
        last = timed_call(body, setup)
    repeats = int(cfg["budget_ms"] / last) if last > 0 else cfg["max_repeats"]
    repeats = min(max(repeats, cfg["min_repeats"]), cfg["max_repeats"])
    times = [timed_call(body, setup) for _ in range(repeats)]
    emit(bench, shape, dtype, metric, work, times, mode, note)


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def randn_as(shape, label):
    return torch.randn(*shape).to(DTYPES[label])


# --- 1. GEMM -----------------------------------------------------------------------------------------

def bench_gemm():
    for n in ((128, 256) if cfg["quick"] else (256, 512, 1024, 2048, 4096)):
        for label in ("f32", "bf16", "f16"):
            a, b = randn_as((n, n), label), randn_as((n, n), label)
            try:
                torch.matmul(a, b)
            except RuntimeError as e:  # 1.13 has no f16 matmul on the CPU
                print("kernels.py: matmul %s skipped: %s" % (label, e), file=sys.stderr)
                continue
            measure("matmul", "%dx%dx%d" % (n, n, n), label, "GFLOP/s", 2.0 * n ** 3, lambda: torch.matmul(a, b), 1)


# --- 2. convolution ------------------------------------------------------------------------------------

# kernels.c's layers: 3x3, stride 1, padding 1, no bias; a network's first layer gets no input gradient.
CONV_LAYERS = [("mnist", 128, 1, 28, 32, False), ("mnist", 128, 32, 14, 64, True),
               ("resnet9", 64, 3, 32, 64, False), ("resnet9", 64, 64, 32, 128, True),
               ("resnet9", 64, 128, 16, 128, True), ("resnet9", 64, 256, 8, 512, True)]


def bench_conv_layer(model, n, c_in, hw, c_out, input_grad, label):
    n = 8 if cfg["quick"] else n
    x, w = randn_as((n, c_in, hw, hw), label), randn_as((c_out, c_in, 3, 3), label)
    gy = torch.ones(n, c_out, hw, hw, dtype=DTYPES[label])
    flops = 2.0 * n * c_out * hw * hw * c_in * 9
    shape = "%s %dx%dx%dx%d->%d" % (model, n, c_in, hw, hw, c_out)

    measure("conv2d_fwd", shape, label, "GFLOP/s", flops, lambda: F.conv2d(x, w, None, 1, 1), 2)

    w.requires_grad_(True)
    x.requires_grad_(input_grad)

    def setup():
        x.grad = None
        w.grad = None
    measure("conv2d_fwdbwd", shape, label, "GFLOP/s", flops * (3 if input_grad else 2),
            lambda: F.conv2d(x, w, None, 1, 1).backward(gy), 2, setup)


def bench_conv():
    for layer in CONV_LAYERS:
        for label in ("f32", "bf16"):
            bench_conv_layer(*layer, label)


# --- 3. elementwise ops and casts (the memcpy baseline is kernels.c's) --------------------------------

def bench_elementwise_ops(n, label):
    a, b = randn_as((n,), label), randn_as((n,), label)
    a0 = a.clone()
    size = 4 if label == "f32" else 2

    def reset():  # in-place ops start again from the same values (untimed), as in kernels.c
        a.copy_(a0)
    ops = [("add", lambda: torch.add(a, b), 3, None), ("mul", lambda: torch.mul(a, b), 3, None),
           ("relu", lambda: torch.relu(a), 2, None), ("add_", lambda: a.add_(b), 3, reset),
           ("relu_", lambda: a.relu_(), 2, reset), ("clone", lambda: a.clone(), 2, None),
           ("copy_", lambda: a.copy_(b), 2, None)]
    for bench, body, tensors, setup in ops:
        try:
            body()
        except RuntimeError as e:  # 1.13 has no f16 relu on the CPU
            print("kernels.py: %s %s skipped: %s" % (bench, label, e), file=sys.stderr)
            continue
        measure(bench, str(n), label, "GB/s", float(tensors * size * n), body, 2, setup)


def bench_casts(n):
    x32 = torch.randn(n)
    casts = [("f32->bf16", x32, torch.bfloat16), ("f32->f16", x32, torch.float16),
             ("bf16->f32", x32.to(torch.bfloat16), torch.float32), ("f16->f32", x32.to(torch.float16), torch.float32)]
    for label, src, dtype in casts:
        measure("cast", str(n), label, "GB/s", 6.0 * n, lambda: src.to(dtype), 2)


def bench_elementwise():
    n = (1 << 20) if cfg["quick"] else (16 << 20)
    bench_elementwise_ops(n, "f32")
    bench_elementwise_ops(n, "bf16")
    bench_elementwise_ops(n, "f16")
    bench_casts(n)


# --- 4. softmax and cross-entropy -----------------------------------------------------------------------

def bench_softmax():
    rows, classes = (256 if cfg["quick"] else 4096), 1000
    x = torch.randn(rows, classes)
    target = torch.randint(0, classes, (rows,), dtype=torch.int64)
    shape, nbytes = "%dx%d" % (rows, classes), 4.0 * rows * classes
    measure("softmax", shape, "f32", "GB/s", 2 * nbytes, lambda: torch.softmax(x, 1), 2)
    measure("log_softmax", shape, "f32", "GB/s", 2 * nbytes, lambda: torch.log_softmax(x, 1), 2)
    measure("cross_entropy", shape, "f32", "GB/s", nbytes + 8.0 * rows, lambda: F.cross_entropy(x, target), 2)


# --- 5. unscale and the optimizer steps -------------------------------------------------------------------

def unscale_fn(grads):
    """The GradScaler's check-and-unscale: the fused kernel where PyTorch has one on the CPU, else the
    same work in foreach and reduction ops, named in the note."""
    found_inf, inv_scale = torch.zeros(1), torch.ones(1)
    try:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale), None
    except (RuntimeError, NotImplementedError):
        def composite():
            for g in grads:
                found_inf.add_(torch.logical_not(torch.isfinite(g).all()))
            torch._foreach_mul_(grads, inv_scale.item())
        return composite, ("composite: PyTorch %s has no CPU _amp_foreach_non_finite_check_and_unscale_; "
                           "isfinite().all() per gradient, then _foreach_mul_" % torch.__version__)


def bench_amp():
    unit = (64 << 10) if cfg["quick"] else (1 << 20)
    parts = (8, 4, 3, 1)
    params = [torch.full((k * unit,), 0.01, requires_grad=True) for k in parts]
    for p in params:
        p.grad = torch.ones_like(p)
    n = sum(p.numel() for p in params)
    shape = "%d in %d tensors" % (n, len(params))

    body, note = unscale_fn([p.grad for p in params])
    measure("unscale", shape, "f32", "GB/s", 2 * 4.0 * n, body, 2, note=note)
    # kernels.c counts the bytes: SGD with momentum 5 x 4n, Adam 7 x 4n. 1.13's default is foreach=False.
    for bench, make, nbytes in (("sgd_momentum", lambda **k: torch.optim.SGD(params, lr=1e-3, momentum=0.9, **k), 5),
                                ("adam", lambda **k: torch.optim.Adam(params, lr=1e-3, **k), 7)):
        for suffix, kwargs in (("", {}), ("_foreach", {"foreach": True})):
            opt = make(**kwargs)
            measure(bench + suffix, shape, "f32", "GB/s", nbytes * 4.0 * n, opt.step, 2)


# --- 6. the cost per op ---------------------------------------------------------------------------------

def bench_dispatch():
    ops = 10000 if cfg["quick"] else 100000
    for mode in ("autocast=off,grad=off", "autocast=off,grad=on", "autocast=bf16,grad=off", "autocast=bf16,grad=on"):
        grad = mode.endswith("grad=on")
        a, b = torch.ones(4, requires_grad=grad), torch.ones(4, requires_grad=grad)

        def adds():
            for _ in range(ops):
                torch.add(a, b)

        def body():
            if mode.startswith("autocast=bf16"):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    adds()
            else:
                adds()
        measure("dispatch_add", "4", "f32", "ns/op", ops, body, 2, mode=mode)


# --- 7. max pooling ---------------------------------------------------------------------------------------

# kernels.c's poolings: 2x2 windows with stride 2, forward with indices and forward + backward, in both
# layouts; GB/s counts the values only (x, y, and dy, dx with the backward), each once.
POOL_SHAPES = ((128, 32, 28, 28), (128, 64, 14, 14))


def bench_pool_case(shape, label, mode):
    n, c, h, w = shape
    n = 8 if cfg["quick"] else n
    x = randn_as((n, c, h, w), label)
    gy = torch.ones(n, c, h // 2, w // 2, dtype=DTYPES[label])
    if mode == "channels_last":
        x, gy = x.contiguous(memory_format=torch.channels_last), gy.contiguous(memory_format=torch.channels_last)
    size = 4 if label == "f32" else 2
    nbytes = size * n * c * h * w * 1.25
    name = "%dx%dx%dx%d" % (n, c, h, w)
    try:
        F.max_pool2d(x, 2, return_indices=True)
    except RuntimeError as e:
        print("kernels.py: max_pool2d %s %s skipped: %s" % (label, mode, e), file=sys.stderr)
        return
    measure("max_pool2d_fwd", name, label, "GB/s", nbytes, lambda: F.max_pool2d(x, 2, return_indices=True), 2,
            mode=mode)
    x.requires_grad_(True)

    def setup():
        x.grad = None
    measure("max_pool2d_fwdbwd", name, label, "GB/s", 2 * nbytes,
            lambda: F.max_pool2d(x, 2, return_indices=True)[0].backward(gy), 2, setup, mode=mode)


def bench_pool():
    for shape in POOL_SHAPES:
        for label in ("f32", "bf16"):
            for mode in ("nchw", "channels_last"):
                bench_pool_case(shape, label, mode)


def config_field(name):
    m = re.search(r"%s=([^,\s]+)" % name, torch.__config__.show())
    return m.group(1) if m else "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small shapes, few repeats (a smoke test)")
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    args = ap.parse_args()
    groups = args.only.split(",")
    for g in groups:
        if g not in GROUPS:
            ap.error("unknown group %r (%s)" % (g, " ".join(GROUPS)))
    if args.quick:
        cfg.update(quick=True, budget_ms=50.0, min_repeats=2, max_repeats=5)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    torch.manual_seed(0)
    capability = re.search(r"CPU capability usage: (\S+)", torch.__config__.show())
    print(json.dumps({"meta": "pytorch", "version": torch.__version__, "threads": torch.get_num_threads(),
                      "blas": config_field("BLAS_INFO"), "mkldnn": torch.backends.mkldnn.is_available(),
                      "cpu_capability": capability.group(1) if capability else "unknown", "quick": args.quick},
                     separators=(",", ":")), flush=True)
    for name, fn in (("gemm", bench_gemm), ("conv", bench_conv), ("elementwise", bench_elementwise),
                     ("softmax", bench_softmax), ("amp", bench_amp), ("dispatch", bench_dispatch),
                     ("pool", bench_pool)):
        if name in groups:
            fn()


if __name__ == "__main__":
    main()
