#!/usr/bin/python3
"""PyTorch peer of bench/checkpoint: torch.save and torch.load of the same
model state sluice saves (`--tensors` f32 tensors of [rows, cols]: a
model's weights with Adam's m and v), into a file under `--dir`.

Prints one line per repeat:
  "torch save_s S load_s L bytes B"
save_s is torch.save of the state dict, then flush and fsync of the file
(sluice's save fsyncs too, so both wait for the disk); load_s is
torch.load of that file into memory (from the page cache, as sluice's
restore in the same run)."""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--tensors", type=int, default=24)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print("torch missing: %s" % e, file=sys.stderr)
        return 3
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(1)
    state = {"w%d" % i: torch.rand(a.rows, a.cols, generator=gen)
             for i in range(a.tensors)}
    path = os.path.join(a.dir, "torch_state.pt")
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        t1 = time.perf_counter()
        loaded = torch.load(path)
        t2 = time.perf_counter()
        assert len(loaded) == len(state)
        print("torch save_s %.6f load_s %.6f bytes %d" %
              (t1 - t0, t2 - t1, os.path.getsize(path)), flush=True)
    os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
