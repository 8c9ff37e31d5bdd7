#!/usr/bin/python3
"""The GPT demo's training step timed, PyTorch's side (bench/gpt_step.c is
mixgrad's twin; bench/gpt_step.py --compare runs both, alternating).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/gpt_step.py --model small --amp bf16 --warmup 3 --repeat 20
    /usr/bin/python3 bench/gpt_step.py --compare build/bench/gpt_step --rounds 3 --out bench/gpt.md

The same model as examples/gpt/model.c (token embedding and a learned
position table, pre-norm TransformerEncoderLayers with GELU under a causal
mask, a final LayerNorm, a linear head), the same step: zero_grad
(set_to_none), forward under torch.autocast over 32 windows, cross-entropy
over every position, backward, AdamW. Threads: torch.set_num_threads
(OMP_NUM_THREADS, default 2). PyTorch 1.13's CPU autocast runs bfloat16 only,
so --amp f16 is mixgrad's alone. One JSON line on stdout, as the C program's.

With --compare, each round runs mixgrad's process and PyTorch's (the order
alternating from round to round, so a slow phase of the machine hits both)
for --amp off and bf16, pools the per-step times and writes a table of
medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {"small": dict(ctx=64, d_model=128, heads=4, layers=4, ff=512),
           "tiny": dict(ctx=32, d_model=32, heads=2, layers=2, ff=64)}
VOCAB = 96


def step_times(args):
    import torch
    from torch import nn

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    torch.manual_seed(1)
    c = CONFIGS[args.model]

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(VOCAB, c["d_model"])
            nn.init.normal_(self.tok_emb.weight, 0.0, 0.02)
            self.pos_emb = nn.Parameter(torch.randn(c["ctx"], c["d_model"]) * 0.02)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(c["d_model"], c["heads"], c["ff"], 0.0, activation="gelu",
                                           batch_first=True, norm_first=True) for _ in range(c["layers"]))
            self.norm = nn.LayerNorm(c["d_model"])
            self.head = nn.Linear(c["d_model"], VOCAB)

        def forward(self, idx):
            length = idx.shape[1]
            h = self.tok_emb(idx) + self.pos_emb[:length]
            mask = nn.Transformer.generate_square_subsequent_mask(length)
            for block in self.blocks:
                h = block(h, src_mask=mask)
            return self.head(self.norm(h))

    net = GPT()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randint(0, VOCAB, (args.batch, c["ctx"]))
    y = torch.randint(0, VOCAB, (args.batch * c["ctx"],))
    times = []
    for step in range(args.warmup + args.repeat):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            loss = nn.functional.cross_entropy(net(x).reshape(-1, VOCAB).float(), y)
        loss.backward()
        opt.step()
        if step >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, sum(p.numel() for p in net.parameters())


def compare(args):
    """Alternating rounds of both programs; a markdown table of medians."""
    pooled = {}
    threads = os.environ.get("OMP_NUM_THREADS", "2")
    env = dict(os.environ, OMP_NUM_THREADS=threads)
    for r in range(args.rounds):
        for amp in ("off", "bf16"):
            common = ["--model", args.model, "--amp", amp, "--batch", str(args.batch), "--warmup", str(args.warmup),
                      "--repeat", str(args.repeat)]
            runs = [("mixgrad", [args.compare] + common), ("PyTorch", [sys.executable, __file__] + common)]
            for impl, cmd in runs if r % 2 == 0 else runs[::-1]:
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                pooled.setdefault((amp, impl), []).extend(json.loads(out.strip().splitlines()[-1])["times_ms"])
    lines = ["| amp | mixgrad (ms per step) | PyTorch %s (ms per step) | mixgrad / PyTorch |" % _torch_version(),
             "|---|---|---|---|"]
    for amp in ("off", "bf16"):
        m, p = statistics.median(pooled[(amp, "mixgrad")]), statistics.median(pooled[(amp, "PyTorch")])
        lines.append("| %s | %.1f | %.1f | %.2f |" % (amp, m, p, m / p))
    text = ("GPT demo's training step (`--model %s`, batch %d, %s threads): medians of %d rounds x %d steps each, "
            "alternating.\n\n" % (args.model, args.batch, threads, args.rounds, args.repeat)) + "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text, end="")


def _torch_version():
    import torch
    return torch.__version__


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(CONFIGS), default="small")
    ap.add_argument("--amp", choices=["off", "bf16", "f16"], default="bf16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--compare", metavar="GPT_STEP", help="mixgrad's program: run both, alternating")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="with --compare: write the table there too")
    args = ap.parse_args()
    if args.compare:
        compare(args)
        return
    if args.amp == "f16":
        print(json.dumps({"impl": "pytorch", "amp": "f16", "skipped": "PyTorch 1.13's CPU autocast runs bf16 only"}))
        return
    times, params = step_times(args)
    print(json.dumps({"impl": "pytorch", "model": args.model, "amp": args.amp, "batch": args.batch,
                      "threads": int(os.environ.get("OMP_NUM_THREADS", "2")), "times_ms": times, "params": params}))
    print("gpt_step.py: PyTorch %s amp %s, batch %d: median %.2f ms over %d steps"
          % (args.model, args.amp, args.batch, statistics.median(times), args.repeat), file=sys.stderr)


if __name__ == "__main__":
    main()
