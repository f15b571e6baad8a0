#!/usr/bin/python3
"""PyTorch peer of bench/mlp_vs_torch: the same MLP classifier (hidden layers
of Linear + ReLU, a linear head, softmax cross-entropy, plain SGD), on fixed
random data, one thread per process.

  mlp_torch.py single             one process, torch.set_num_threads(1)
                                  (--threads T: T threads)
  mlp_torch.py ddp --world 2      DistributedDataParallel over gloo, `world`
                                  processes on this machine, the global batch
                                  split between them

Lock-step protocol (what the C driver uses, so that sluice's and PyTorch's
steps alternate and meet the same machine load): after `--warmup` untimed
steps the peer prints "ready"; for every line "step" on stdin it runs one
training step (forward + backward + optimizer step; for ddp every rank, in
step) and prints "t WALL_MS CPU_MS" (the step's wall time, and the CPU
time this process spent in it); on "quit" or end of input
it prints a summary line and exits. With --steps N instead, it runs N timed
steps by itself and prints only the summary:
  "torch single ms_per_step MEDIAN min MIN steps N loss L"
  "torch ddp samples_per_s S ms_per_step MEDIAN world W steps N"

Exporting (single mode; what tests/examples/test_torch.c runs):
  mlp_torch.py single --save-safetensors M.safetensors \
      --save-batch X.npy,Y.npy --steps 3 [sizes] [--lr LR]
writes the initial model's state_dict (PyTorch's names: "0.weight" [hidden,
in], "0.bias", "2.weight", ...) as a safetensors file (without the
safetensors package: st_file.py) and the fixed batch as .npy files (x f32
[batch, in], labels int64 [batch]), then trains --steps steps on that batch
with SGD(lr) and prints "loss STEP VALUE" for each: step 0's is the loss of
the saved weights. examples/mlp --load M.safetensors --data X.npy,Y.npy
--batch B --lr LR runs the same steps.

The driver runs it with OPENBLAS_CORETYPE set to the kernel set sluice
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


def one_step(model, opt, x, y, torch):
    f = torch.nn.functional
    opt.zero_grad(set_to_none=True)
    loss = f.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def train_steps(model, opt, x, y, steps, torch):
    times, loss = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = one_step(model, opt, x, y, torch)
        times.append(time.perf_counter() - t0)
    return times, float(loss) if loss is not None else float("nan")


def commands():
    """Yields True per "step" line on stdin, stops at "quit" or EOF."""
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "step":
            yield True
        elif cmd == "quit":
            return


def export(args, model, opt, x, y, torch):
    """--save-safetensors: the model, the batch, then one loss per step."""
    import numpy
    import st_file
    st_file.save(model.state_dict(), args.save_safetensors, torch,
                 {"format": "pt", "source": "bench/peers/mlp_torch.py"})
    if args.save_batch:
        xp, yp = args.save_batch.split(",")
        numpy.save(xp, x.numpy().astype("<f4"))
        numpy.save(yp, y.numpy().astype("<i8"))
    for i in range(args.steps):
        loss = one_step(model, opt, x, y, torch)
        print("loss %d %.9g" % (i, float(loss)), flush=True)


def run_single(args):
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = build(args, torch)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    x = torch.randn(args.batch, args.inp)
    y = torch.randint(0, args.classes, (args.batch,))
    if args.save_safetensors:
        export(args, model, opt, x, y, torch)
        return
    train_steps(model, opt, x, y, args.warmup, torch)
    if args.lockstep:
        print("ready", flush=True)
        times, loss = [], None
        for _ in commands():
            c0 = time.process_time()
            t0 = time.perf_counter()
            loss = one_step(model, opt, x, y, torch)
            times.append(time.perf_counter() - t0)
            cpu = time.process_time() - c0
            print("t %.4f %.4f" % (times[-1] * 1e3, cpu * 1e3), flush=True)
        loss = float(loss) if loss is not None else float("nan")
    else:
        times, loss = train_steps(model, opt, x, y, args.steps, torch)
    if times:
        print("torch single ms_per_step %.4f min %.4f steps %d loss %.5f" %
              (statistics.median(times) * 1e3, min(times) * 1e3, len(times),
               loss), flush=True)


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
    if args.lockstep:
        # Rank 0 reads the commands and tells the others: 1 step, 0 quit.
        flag = torch.zeros(1, dtype=torch.int32)
        if rank == 0:
            print("ready", flush=True)
            cmds = commands()
        times = []
        while True:
            if rank == 0:
                flag[0] = 1 if next(cmds, False) else 0
            dist.broadcast(flag, 0)
            if not flag[0]:
                break
            dist.barrier()
            t0 = time.perf_counter()
            one_step(model, opt, x, y, torch)
            dist.barrier()
            times.append(time.perf_counter() - t0)
            if rank == 0:
                print("t %.4f nan" % (times[-1] * 1e3), flush=True)
        elapsed = sum(times)
    else:
        t0 = time.perf_counter()
        times, _ = train_steps(model, opt, x, y, args.steps, torch)
        dist.barrier()
        elapsed = time.perf_counter() - t0
    if rank == 0 and times:
        print("torch ddp samples_per_s %.2f ms_per_step %.4f world %d steps %d" %
              (args.batch * len(times) / elapsed, statistics.median(times) * 1e3,
               args.world, len(times)), flush=True)
    dist.destroy_process_group()


def run_ddp(args):
    # Rank 0 runs in this process: spawned children get no stdin, and rank 0
    # reads the lock-step commands.
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    others = [ctx.Process(target=ddp_worker, args=(r, args))
              for r in range(1, args.world)]
    for p in others:
        p.start()
    ddp_worker(0, args)
    for p in others:
        p.join()
    if any(p.exitcode != 0 for p in others):
        sys.exit(1)


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
    p.add_argument("--threads", type=int, default=1,
                   help="single: torch.set_num_threads (ddp: 1 per process)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--lockstep", action="store_true",
                   help="one step per 'step' line on stdin (see above)")
    p.add_argument("--save-safetensors", metavar="PATH",
                   help="single: write the initial state_dict to PATH, then "
                   "train --steps steps printing each loss (see above)")
    p.add_argument("--save-batch", metavar="X.npy,Y.npy",
                   help="with --save-safetensors: the batch as .npy files")
    args = p.parse_args()
    if args.save_batch is not None and (
            not args.save_safetensors or args.save_batch.count(",") != 1):
        p.error("--save-batch wants X.npy,Y.npy and --save-safetensors")
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
