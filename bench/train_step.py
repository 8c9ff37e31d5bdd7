#!/usr/bin/python3
"""The training-step benchmark, PyTorch's side (bench/train_step.c is
mixgrad's; bench/run_train.py runs both, alternating, and compares).

    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/train_step.py \\
        --model cnn --amp bf16 --batch 128 --warmup 5 --repeat 30 [--seconds S] [--channels-last]
    python3 bench/train_step.py --device cuda --model resnet9 --amp f16 --batch 64
    bench/.venv-torch2/bin/python bench/train_step.py --model cnn --batch 128 --flops

The same models, optimizers, step and JSON line as the C program: a step is
zero_grad(set_to_none=True), forward under torch.autocast, cross-entropy,
backward, optimizer step, on one random batch; on CUDA, f16 goes through a
GradScaler as mixgrad's does, and each step ends with torch.cuda.synchronize()
as mixgrad's ends with mx_synchronize; "host_ms" times each step up to that
synchronisation, as train_step.c's does. Threads:
torch.set_num_threads(OMP_NUM_THREADS, default 2), since torch's own default
on these machines is 1. Where CPU autocast has no float16 (PyTorch 1.13),
--amp f16 on the CPU prints a line with "skipped" and times nothing.
--channels-last keeps the convolutional models' weights and batch in
channels-last memory format. --flops prints the FLOPs of one training
step instead of timing it (torch.utils.flop_counter, PyTorch 2.1 or later).

cuDNN's numerics are mixgrad's by default, so both sides run the same
arithmetic: on CUDA torch.backends.cudnn.allow_tf32 = False (float32
convolutions in exact float32, not TF32) and torch.backends.cudnn.deterministic
= True (deterministic algorithms only), where PyTorch's own defaults are True
and False. --cudnn-tf32 and --cudnn-nondeterministic restore PyTorch's
defaults, as train_step.c's flags of those names set mixgrad's
(mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic). Matrix products keep
torch.backends.cuda.matmul.allow_tf32's default, False, as mixgrad's cuBLAS
products use no TF32. --cudnn-benchmark sets torch.backends.cudnn.benchmark
= True (each new geometry's algorithms timed, the fastest allowed kept; off by
default on both sides), as train_step.c's does mx_set_cudnn_benchmark. The JSON
line says which ("cudnn_tf32", "cudnn_deterministic", "cudnn_benchmark").
"""
import argparse
import json
import warnings
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


def current_rss_kb():
    """VmRSS from /proc/self/status, or -1."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


# --- the models: mnist.c's MLP and CNN, cifar10.c's ResNet-9 -------------------------------

def make_mlp():
    """784-512-512-10 with ReLUs."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def make_cnn():
    """conv3x3(32)-ReLU-pool, conv3x3(64)-ReLU-pool, 128 hidden units, 10 classes."""
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def conv_bn(c_in, c_out):
    """conv3x3 (no bias: the batch norm has one) - batch norm - ReLU"""
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out, eps=1e-5, momentum=0.1), nn.ReLU())


class Residual(nn.Module):
    """x + body(x), as mx_residual_new(body, NULL)."""

    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(conv_bn(c, c), conv_bn(c, c))

    def forward(self, x):
        return self.body(x) + x


def make_resnet9():
    """prep 64 | 128, pool, residual | 256, pool | 512, pool, residual | pool 4x4, linear 10"""
    return nn.Sequential(conv_bn(3, 64), conv_bn(64, 128), nn.MaxPool2d(2), Residual(128),
                         conv_bn(128, 256), nn.MaxPool2d(2), conv_bn(256, 512), nn.MaxPool2d(2),
                         Residual(512), nn.MaxPool2d(4),
                         nn.Sequential(nn.Flatten(), nn.Linear(512, 10, bias=False)))


MODELS = {"mlp": make_mlp, "cnn": make_cnn, "resnet9": make_resnet9}


def make_optimizer(model, params):
    """mlp: SGD momentum 0.9, lr 0.05; cnn: Adam lr 1e-3; resnet9: Nesterov SGD lr 0.1, wd 5e-4."""
    if model == "cnn":
        return torch.optim.Adam(params, lr=1e-3)
    if model == "resnet9":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


# --- the step ------------------------------------------------------------------------------

class Bench:
    def __init__(self, args):
        torch.manual_seed(args.seed)
        self.device = args.device
        self.net = MODELS[args.model]().to(self.device)
        if args.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        self.opt = make_optimizer(args.model, self.net.parameters())
        self.amp = {"off": None, "bf16": torch.bfloat16, "f16": torch.float16}[args.amp]
        self.scaler = torch.cuda.amp.GradScaler() if self.amp == torch.float16 else None
        shape = (args.batch, 3, 32, 32) if args.model == "resnet9" else (args.batch, 1, 28, 28)
        self.x = torch.randn(shape).to(self.device)
        if args.channels_last:
            self.x = self.x.contiguous(memory_format=torch.channels_last)
        self.y = torch.randint(0, 10, (args.batch,), dtype=torch.int64).to(self.device)

    def forward_loss(self):
        with torch.autocast(self.device, dtype=self.amp or torch.bfloat16, enabled=self.amp is not None):
            return F.cross_entropy(self.net(self.x), self.y)

    def backward_step(self, loss):
        if self.scaler is None:
            loss.backward()
            self.opt.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()

    def step(self):
        """A step; the time the host took to queue it (perf_counter's), before the closing synchronisation."""
        self.opt.zero_grad(set_to_none=True)
        self.backward_step(self.forward_loss())
        queued = time.perf_counter()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return queued

    def measure_graph(self):
        """One more step, untimed: the bytes of the unique storages autograd
        saves for backward during the forward (saved_tensors_hooks see every
        one), less those that existed before it (parameters, buffers, the
        batch), so autocast's casts of weights and inputs count and the
        weights themselves do not. train_step.c measures the same quantity
        as the storage bytes still allocated once the forward's handles are
        released and only the loss is kept."""
        before = {t.storage().data_ptr()
                  for t in [*self.net.parameters(), *self.net.buffers(), self.x, self.y]}
        saved = {}

        def pack(t):
            s = t.storage()
            if s.data_ptr() not in before:
                saved[s.data_ptr()] = s.nbytes()
            return t

        self.opt.zero_grad(set_to_none=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = self.forward_loss()
        self.backward_step(loss)
        return sum(saved.values())


def loop_done(args, done, count, least, share, start):
    """Whether a loop that began at start and has made `done` steps stops
    before its next: past its count, or past its share of --seconds once it
    has made `least` steps (as in train_step.c)."""
    if done >= count:
        return True
    return args.seconds > 0 and done >= least and time.perf_counter() - start > args.seconds * share


def run(args, base_rss_kb):
    b = Bench(args)
    start, done = time.perf_counter(), 0
    while not loop_done(args, done, args.warmup, 1, 0.25, start):
        b.step()
        done += 1
    times, host = [], []
    start = time.perf_counter()
    while not loop_done(args, len(times), args.repeat, 3, 1.0, start):
        t0 = time.perf_counter()
        queued = b.step()
        times.append((time.perf_counter() - t0) * 1e3)
        host.append((queued - t0) * 1e3)
    graph_bytes = b.measure_graph()
    return {"times_ms": [round(t, 6) for t in times], "host_ms": [round(t, 6) for t in host],
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "base_rss_kb": base_rss_kb, "graph_bytes": graph_bytes,
            "params": sum(p.numel() for p in b.net.parameters())}


def cpu_autocast_refuses(dtype):
    """Whether this PyTorch's CPU autocast refuses dtype (1.13 does float16)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.autocast("cpu", dtype=dtype):
                return not torch.is_autocast_cpu_enabled()
        except RuntimeError:  # 1.13: "AutocastCPU only support Bfloat16"
            return True


def step_flops(args):
    """The FLOPs of one training step's forward and backward, as PyTorch's
    flop counter computes them from the operands' shapes (matrix products
    and convolutions; the rest is memory-bound and not counted)."""
    from torch.utils.flop_counter import FlopCounterMode
    b = Bench(args)
    with FlopCounterMode(display=False) as counter:
        b.opt.zero_grad(set_to_none=True)
        b.forward_loss().backward()
    return counter.get_total_flops()


def main():
    p = argparse.ArgumentParser(description="Times PyTorch's training step on a random batch; prints one JSON line.")
    p.add_argument("--model", choices=sorted(MODELS), default="cnn")
    p.add_argument("--amp", choices=["off", "bf16", "f16"], default="off")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seconds", type=int, default=0,
                   help="cap on the timed steps' time (at least 3 steps; warm-up: a quarter of it); 0: none")
    p.add_argument("--channels-last", action="store_true", help="weights and batch in channels-last memory format")
    p.add_argument("--cudnn-tf32", action="store_true",
                   help="CUDA: torch.backends.cudnn.allow_tf32 = True, PyTorch's default (default here: False, "
                        "mixgrad's: exact float32 convolutions)")
    p.add_argument("--cudnn-nondeterministic", action="store_true",
                   help="CUDA: torch.backends.cudnn.deterministic = False, PyTorch's default (default here: True, "
                        "mixgrad's: deterministic algorithms only)")
    p.add_argument("--cudnn-benchmark", action="store_true",
                   help="CUDA: torch.backends.cudnn.benchmark = True (default here and in PyTorch: False)")
    p.add_argument("--flops", action="store_true", help="print one step's FLOPs (needs PyTorch 2.1+) and exit")
    args = p.parse_args()
    if args.device == "cuda":
        torch.backends.cudnn.allow_tf32 = args.cudnn_tf32
        torch.backends.cudnn.deterministic = not args.cudnn_nondeterministic
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.flops:
        print(json.dumps({"model": args.model, "batch": args.batch, "step_flops": step_flops(args),
                          "version": torch.__version__}))
        return
    base_rss_kb = current_rss_kb()  # the interpreter and torch, before the model
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    result = {"impl": "pytorch", "model": args.model, "amp": args.amp, "device": args.device, "batch": args.batch,
              "threads": torch.get_num_threads(), "warmup": args.warmup, "channels_last": args.channels_last,
              "cudnn_tf32": args.cudnn_tf32, "cudnn_deterministic": not args.cudnn_nondeterministic,
              "cudnn_benchmark": args.cudnn_benchmark}
    if args.amp == "f16" and args.device == "cpu" and cpu_autocast_refuses(torch.float16):
        result["skipped"] = f"CPU autocast in PyTorch {torch.__version__} has no float16"
    else:
        result.update(run(args, base_rss_kb))
        print(f"train_step.py: pytorch {args.model} amp {args.amp} on {args.device}, batch {args.batch}, "
              f"{result['threads']} threads: "
              f"median {statistics.median(result['times_ms']):.3f} ms over {len(result['times_ms'])} steps", file=sys.stderr)
    result["version"] = torch.__version__
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
