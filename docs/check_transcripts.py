#!/usr/bin/env python3
"""Keeps the docs' transcripts true: every fenced block in docs/*.md whose
first line is `$ COMMAND` is run again (in a scratch folder, with `build/`
meaning the build directory) and must print exactly the rest of the block.
It also checks the examples in docs/AMP.md's policy table against the
library's own listing (build/examples/amp/policies): each is an op or a
group of ops named in GROUPS, and has its row's policy, so a policy change
or a renamed op cannot leave the table behind.

    python3 docs/check_transcripts.py BUILD_DIR [FILE.md ...]            # the test (meson: doc-transcripts)
    python3 docs/check_transcripts.py BUILD_DIR --update [FILE.md ...]   # rewrite the blocks from the programs
"""
import difflib
import glob
import os
import re
import subprocess
import sys
import tempfile

DOCS = os.path.dirname(os.path.abspath(__file__))
BLOCK = re.compile(r"^```\n(\$ [^\n]*)\n(.*?)^```$", re.M | re.S)
POLICIES = ["lower", "fp32", "promote", "banned", "none"]


# oneDNN held to AVX2 (2.x reads DNNL_, 3.x ONEDNN_): whether bfloat16 products run natively depends on the
# CPU (bf16 dot products; valgrind hides them), and the AMP trace says when they do not, so without this a
# transcript would read differently from one machine to the next.
SAME_ON_EVERY_CPU = {"DNNL_MAX_CPU_ISA": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
# One thread, whatever the caller's MX_NUM_THREADS (meson pins 2, a shell may pin none): float16 products on the CPU
# sum in another order on two threads, which a trained loss's last digit shows.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MX_NUM_THREADS": "1"}


def run(command, build):
    """The output of a transcript's command, run by the shell in a scratch folder."""
    command = re.sub(r"(^|[\s=])build/", lambda m: m.group(1) + os.path.abspath(build) + "/", command)
    with tempfile.TemporaryDirectory() as scratch:
        p = subprocess.run(command, shell=True, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=300, env=dict(os.environ, **ONE_THREAD, **SAME_ON_EVERY_CPU))
    return p.stdout


def check_file(path, build, update):
    text = open(path).read()
    problems = []

    def replace(m):
        command, shown = m.group(1), m.group(2)
        actual = run(command[2:], build)
        if actual != shown:
            problems.append(f"{os.path.relpath(path)}: `{command}` prints something else now:\n" + "".join(
                difflib.unified_diff(shown.splitlines(True), actual.splitlines(True), "the doc", "the program")))
        return f"```\n{command}\n{actual}```"

    new_text = BLOCK.sub(replace, text)
    if update and new_text != text:
        with open(path, "w") as f:
            f.write(new_text)
        print(f"updated {os.path.relpath(path)}")
        return []
    return problems


def policy_of_each_op(build):
    """{op: policy} from the policies program's listing."""
    out = run("build/examples/amp/policies", build)
    listing = out.split("\n\n")[0]
    ops, policy = {}, None
    for line in listing.splitlines()[1:]:
        m = re.match(r"(\w+) \(\d+\):$", line)
        if m:
            policy = m.group(1)
        elif policy:
            ops.update({op: policy for op in line.split()})
    return ops


# The words of AMP.md's policy table that name a group of ops rather than one: the ops each stands for.
GROUPS = {
    "conv*": lambda ops: [op for op in ops if op.startswith("conv") and "backward" not in op],
    "attention": lambda ops: ["scaled_dot_product_attention"],
    "RNN cells": lambda ops: [op for op in ops if op.endswith("_cell")],
    "the losses": lambda ops: [op for op in ops if op.endswith("_loss") or op in (
        "cross_entropy", "kl_div", "binary_cross_entropy_with_logits")],
    "views": lambda ops: ["view", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "slice", "select",
                          "expand", "narrow", "flatten"],
    "max": lambda ops: ["amax", "max_dim"],
}


def check_policy_table(build):
    """Each example in AMP.md's policy table is an op or a group of GROUPS, and has the policy of its row."""
    ops = policy_of_each_op(build)
    if not ops:
        return ["build/examples/amp/policies listed no ops"]
    problems = []
    text = open(os.path.join(DOCS, "AMP.md")).read()
    rows = re.findall(r"^\| (" + "|".join(POLICIES) + r") \| [^|]+ \| ([^|]+) \|$", text, re.M)
    if len(rows) != len(POLICIES):
        problems.append(f"docs/AMP.md: the policy table has {len(rows)} of the {len(POLICIES)} policies' rows")
    for policy, examples in rows:
        for example in (e.strip() for e in examples.split(",")):
            members = GROUPS[example](ops) if example in GROUPS else [example]
            for op in members:
                if op not in ops:
                    problems.append(f"docs/AMP.md: the policy table's {example!r} under {policy} is no op of the "
                                    "library (nor a group check_transcripts.py knows)")
                elif ops[op] != policy:
                    problems.append(f"docs/AMP.md: the policy table lists {op} under {policy} (as {example!r}); "
                                    f"the library says {ops[op]}")
    return problems


def main():
    args = [a for a in sys.argv[1:] if a != "--update"]
    if not args:
        sys.exit(__doc__)
    build, files = args[0], args[1:] or sorted(glob.glob(os.path.join(DOCS, "*.md")))
    update = "--update" in sys.argv
    problems = []
    for path in files:
        problems += check_file(path, build, update)
    problems += check_policy_table(build)
    for p in problems:
        print(p)
    if problems and not update:
        print(f"{len(problems)} problem(s); `python3 docs/check_transcripts.py {build} --update` rewrites the "
              "transcripts from the programs")
        return 1
    print("every transcript matches its program")
    return 0


if __name__ == "__main__":
    sys.exit(main())
