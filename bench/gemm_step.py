#!/usr/bin/python3
"""One square matrix product, timed: torch.matmul's side of the GEMM row of
scripts/gpu-check (bench/gemm_step.c is mixgrad's, with the same flags,
samples and JSON line).

    python3 bench/gemm_step.py --device cuda --n 4096 --dtype bf16

Matrix products keep torch.backends.cuda.matmul.allow_tf32's default,
False, as mixgrad's float32 products use no TF32.
"""
import argparse
import json
import statistics
import sys
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--calls", type=int, default=10)
    args = p.parse_args()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    g = torch.Generator(device="cpu").manual_seed(1)
    a = torch.randn(args.n, args.n, generator=g).to(args.device, dtype)
    b = torch.randn(args.n, args.n, generator=g).to(args.device, dtype)

    def sync():
        if args.device == "cuda":
            torch.cuda.synchronize()

    times = []
    for s in range(-args.warmup, args.repeat):
        start = time.perf_counter()
        for _ in range(args.calls):
            torch.matmul(a, b)
        sync()
        if s >= 0:
            times.append((time.perf_counter() - start) * 1e3 / args.calls)
    median = statistics.median(times)
    tflops = 2.0 * args.n ** 3 / (median * 1e-3) / 1e12
    print(json.dumps({"impl": "pytorch", "bench": "matmul", "device": args.device, "n": args.n, "dtype": args.dtype,
                      "times_ms": times, "tflops": tflops, "version": torch.__version__}))
    print(f"gemm_step.py: torch {args.n}x{args.n} {args.dtype} on {args.device}: {median:.3f} ms, "
          f"{tflops:.1f} TFLOP/s", file=sys.stderr)


if __name__ == "__main__":
    main()
