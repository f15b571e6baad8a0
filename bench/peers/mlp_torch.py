#!/usr/bin/python3
"""PyTorch peer of bench/mlp_vs_torch: the same MLP classifier (hidden layers
of Linear + ReLU, a linear head, softmax cross-entropy, plain SGD), on fixed
random data, one thread per process.

  mlp_torch.py single --steps 40            one process, torch.set_num_threads(1)
  mlp_torch.py ddp --world 2 --steps 40     DistributedDataParallel over gloo,
                                            `world` processes on this machine,
                                            the global batch split between them

Prints one line the C driver parses:
  single: "torch single ms_per_step MEDIAN min MIN steps N"
  ddp:    "torch ddp samples_per_s S ms_per_step MEDIAN world W steps N"
Per-step times are wall-clock times of forward + backward + optimizer step
(after `--warmup` untimed steps); the median is what the driver compares.

The driver runs this with OPENBLAS_CORETYPE set to the kernel set sluice
itself uses (Debian's torch does its matmuls in the system OpenBLAS), so both
sides multiply with the same kernels."""
import argparse
import os
import statistics
import sys
import time


def build(args, torch):
    nn = torch.nn
    layers = []
    width = args.inp
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.ReLU()]
        width = args.hidden
    layers.append(nn.Linear(width, args.classes))
    return nn.Sequential(*layers)


def train_steps(model, opt, x, y, steps, torch):
    f = torch.nn.functional
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = f.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times, float(loss)


def run_single(args):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = build(args, torch)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x = torch.randn(args.batch, args.inp)
    y = torch.randint(0, args.classes, (args.batch,))
    train_steps(model, opt, x, y, args.warmup, torch)
    times, loss = train_steps(model, opt, x, y, args.steps, torch)
    print("torch single ms_per_step %.4f min %.4f steps %d loss %.5f" %
          (statistics.median(times) * 1e3, min(times) * 1e3, len(times), loss),
          flush=True)


def ddp_worker(rank, args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                            rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    model = torch.nn.parallel.DistributedDataParallel(build(args, torch))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    local = args.batch // args.world + (1 if rank < args.batch % args.world else 0)
    g = torch.Generator().manual_seed(args.seed + rank)
    x = torch.randn(local, args.inp, generator=g)
    y = torch.randint(0, args.classes, (local,), generator=g)
    train_steps(model, opt, x, y, args.warmup, torch)
    dist.barrier()
    t0 = time.perf_counter()
    times, _ = train_steps(model, opt, x, y, args.steps, torch)
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print("torch ddp samples_per_s %.2f ms_per_step %.4f world %d steps %d" %
              (args.batch * args.steps / elapsed, statistics.median(times) * 1e3,
               args.world, args.steps), flush=True)
    dist.destroy_process_group()


def run_ddp(args):
    import torch.multiprocessing as mp
    mp.spawn(ddp_worker, args=(args,), nprocs=args.world, join=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["single", "ddp"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--in", dest="inp", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29517)
    args = p.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("torch unavailable: %s" % e, file=sys.stderr)
        sys.exit(3)
    if args.mode == "single":
        run_single(args)
    else:
        run_ddp(args)


if __name__ == "__main__":
    main()
