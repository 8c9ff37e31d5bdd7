#!/usr/bin/python3
"""PyTorch's twin of bench/all_reduce.c: torch.distributed on gloo, 2 ranks forked here on a free loopback port,
the same float32 all_reduce sizes and barrier, one call per timing after warm-up, and the MNIST MLP's and
CNN's data-parallel steps (bench/train_step.py's models, both with the MLP's SGD with momentum as in
all_reduce.c, in DistributedDataParallel, which all-reduces the gradients in buckets during backward), a
batch of 128 split among the ranks; rank 0 prints one JSON line per measurement
({"impl":"pytorch","op":...,"bytes":...,"times_ms":[...]}).

    /usr/bin/python3 bench/all_reduce.py [--quick]
"""
import json
import os
import socket
import sys
import time

WORLD = 2
SIZES = [4096, 262144, 2678824, 16777216]  # bytes; 2,678,824: the MNIST MLP's gradients


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, port, quick):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=WORLD)
    reps = 5 if quick else 50

    def timed(fn):
        times = []
        for i in range(-5, reps):
            t0 = time.perf_counter()
            fn()
            if i >= 0:
                times.append((time.perf_counter() - t0) * 1e3)
        return times

    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        times = timed(lambda: dist.all_reduce(t))
        if rank == 0:
            print(json.dumps({"impl": "pytorch", "op": "all_reduce", "bytes": size, "times_ms": times}), flush=True)
    times = timed(dist.barrier)
    if rank == 0:
        print(json.dumps({"impl": "pytorch", "op": "barrier", "bytes": 0, "times_ms": times}), flush=True)
    for model in ("mlp", "cnn"):
        times = timed(ddp_step(rank, model))
        if rank == 0:
            print(json.dumps({"impl": "pytorch", "op": "ddp_step_" + model, "bytes": 0, "times_ms": times}), flush=True)
    dist.destroy_process_group()


def ddp_step(rank, model):
    """One data-parallel step of model ("mlp" or "cnn") on this rank's half of a batch of 128, as a function
    to time; SGD with momentum (the MLP's recipe) for both, as in all_reduce.c."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from train_step import MODELS, make_optimizer
    torch.manual_seed(7 + rank)
    net = DistributedDataParallel(MODELS[model]())  # starts from rank 0's weights, as mx_ddp_broadcast_module
    opt = make_optimizer("mlp", net.parameters())
    x, y = torch.randn(128 // WORLD, 1, 28, 28), torch.randint(0, 10, (128 // WORLD,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()
    return step


def main():
    quick = "--quick" in sys.argv[1:]
    port = free_port()
    pids = []
    for rank in range(WORLD):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                rank_main(rank, port, quick)
            except Exception as e:  # the parent reports the exit status
                print("all_reduce.py: rank %d: %s" % (rank, e), file=sys.stderr)
                code = 1
            sys.stdout.flush()
            os._exit(code)
        pids.append(pid)
    failed = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
