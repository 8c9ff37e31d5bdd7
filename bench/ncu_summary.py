#!/usr/bin/env python3
"""Summarise `ncu --metrics gpu__time_duration.sum --print-summary per-kernel`
output (scripts/gpu-profile): each kernel's total time per step, largest
first, with launches per step, and the step's kernel time and launch count."""
import argparse
import re
from collections import defaultdict

HEADER = re.compile(r"^  (\S.*) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), .*Invocations (\d+)\s*$")
TIME = re.compile(r"^\s+gpu__time_duration\.sum\s+(\w+)\s+([\d.,]+)\s+([\d.,]+)\s+([\d.,]+)")
UNIT = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6,
        "nsecond": 1e-3}


def short(name):
    """A kernel's name without its parameter list, and without its template
    arguments where they are long (cuDNN's and CUTLASS's): mixgrad's
    launchers (elementwise_kernel<max_pool_op>, ...) keep the functor's name."""
    name = name.replace("(anonymous namespace)", "").replace("<unnamed>", "").replace("void ", "", 1).strip()
    lt, paren = name.find("<"), name.find("(")
    if lt < 0 or 0 <= paren < lt:
        return (name[:paren] if paren >= 0 else name)[:100]
    depth = 0
    for end in range(lt, len(name)):
        depth += (name[end] == "<") - (name[end] == ">")
        if depth == 0:
            break
    template = name[lt:end + 1]
    return (name[:lt] + (template if len(template) <= 60 else ""))[:100]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("report")
    p.add_argument("--steps", type=int, required=True, help="steps the profiled process ran (warm-up included)")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    total = defaultdict(float)
    launches = defaultdict(int)
    pending = None
    with open(args.report, errors="replace") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                pending = (short(m.group(1)), int(m.group(8)))
                continue
            t = TIME.match(line)
            if t and pending:
                name, calls = pending
                avg = float(t.group(4).replace(",", "")) * UNIT.get(t.group(1), 1.0)
                total[name] += avg * calls
                launches[name] += calls
                pending = None
    if not total:
        print("  (no kernels found in the report)")
        return
    step_us = sum(total.values()) / args.steps
    print(f"  kernel time per step {step_us / 1000:.3f} ms over {sum(launches.values()) / args.steps:.0f} launches")
    for name in sorted(total, key=total.get, reverse=True)[:args.top]:
        per = total[name] / args.steps
        print(f"  {per:9.1f} us {100 * per / step_us:5.1f}%  {launches[name] / args.steps:5.1f}x  {name}")


if __name__ == "__main__":
    main()
