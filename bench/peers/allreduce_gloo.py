"""All-reduce of float32 between two PyTorch gloo processes on 127.0.0.1,
the reference for bench/allreduce_vs_gloo.c.

    python3 allreduce_gloo.py PORT BUDGET_S BYTES...

Rank 0 prints one line per size: "BYTES SECONDS" (median of the timed
repetitions, each ended by the all-reduce returning on rank 0). Each size
gets 5 warm-up runs and then repetitions until BUDGET_S seconds or 50 runs."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, port, budget, sizes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=2)
    for nbytes in sizes:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(5):  # warm-up, as nccl-tests' default -w 5
            dist.all_reduce(t)
        times = []
        t_end = time.perf_counter() + budget
        while len(times) < 50:
            # both ranks agree on whether to go on
            go = torch.tensor([1 if time.perf_counter() < t_end or len(times) < 3 else 0])
            dist.all_reduce(go, op=dist.ReduceOp.MIN)
            if not go.item():
                break
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        times.sort()
        if rank == 0:
            print(nbytes, times[len(times) // 2], flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    port = int(sys.argv[1])
    budget = float(sys.argv[2])
    sizes = [int(s) for s in sys.argv[3:]]
    mp.spawn(worker, args=(port, budget, sizes), nprocs=2, join=True)
