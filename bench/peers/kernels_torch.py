#!/usr/bin/python3
"""PyTorch peer of bench/kernels_vs_torch.c: the same kernels on the same
shapes and dtypes, timed the same way.

  kernels_torch.py [--device cuda|cpu] [--iters N] [--warmup N]
                   [--flush-bytes B] [--small] [--table] [CASE ...]

A CASE is what the C driver passes, one argument per kernel:
  matmul:DTYPE:M:N:K:TA:TB  C[M,N] = A B with A [M,K] (TA=1: stored [K,M]
                            and transposed), B [K,N] (TB=1: stored [N,K]);
                            DTYPE f32 or bf16
  softmax:ROWS:COLS         softmax over the last axis
  layer_norm:ROWS:COLS      torch.native_layer_norm (y, mean, rstd), eps 1e-5
  adam:N                    one Adam step on N f32 parameters
  add:N                     out = a + b, N f32 elements each
  copy:N                    dst.copy_(src), N f32 elements
Without CASEs it runs the driver's default list (GPT-2 small's shapes); with
--small a small list meant for --device cpu, to check this script and its
output without a GPU.

What PyTorch runs, chosen to do what sluice's kernel does:
  f32 matmul   torch.mm(a, b, out=c) with
               torch.backends.cuda.matmul.allow_tf32 = False and
               float32 matmul precision "highest": true f32, as sluice's
               cublasSgemm in cuBLAS's default math mode
  bf16 matmul  torch.mm(a, b, out_dtype=torch.float32): bf16 operands, f32
               accumulation and output, as sluice's cublasGemmEx with
               CUBLAS_COMPUTE_32F; where this torch has no out_dtype, a bf16
               output, said in the result's note
  softmax      torch.softmax(x, -1)
  layer_norm   torch.native_layer_norm(x, [COLS], gamma, beta, 1e-5), which
               writes mean and rstd too, as sluice's layer_norm does
  adam         torch.optim.Adam(lr 1e-3, betas (0.9, 0.999), eps 1e-8), fused
               on CUDA: reads w, g, m, v and writes w, m, v in place (sluice
               writes new buffers: the same bytes)
  add          torch.add(a, b, out=c)
  copy         dst.copy_(src)

Timing, as in the C driver: each kernel is checked once (no NaN or Inf;
matmul and softmax/layer_norm samples against float64), then --warmup
untimed runs, then --iters runs, each preceded by filling a --flush-bytes
buffer (at least twice the L2 cache) and bracketed by two CUDA events
(torch.cuda.Event(enable_timing=True); on the CPU, time.perf_counter);
the median and the minimum are reported.

Output, one line each:
  info TEXT                               what ran and how
  result CASE MEDIAN_MS MIN_MS ok[; note]  a measured kernel
  result CASE nan nan FAILED: why          a kernel that failed its check or
                                           could not run
With --table, a human-readable table follows. Exit status 0 when every case
was measured, 1 when one failed, 2 for bad arguments, 3 when torch or the
device is unavailable."""
import argparse
import math
import statistics
import sys
import time

GPT2_TOKENS, GPT2_D, GPT2_VOCAB = 8 * 1024, 768, 50257


def default_cases():
    c = []
    for dt in ("f32", "bf16"):
        c.append("matmul:%s:4096:4096:4096:0:0" % dt)
    t, d, v = GPT2_TOKENS, GPT2_D, GPT2_VOCAB
    for dt in ("f32", "bf16"):
        c += ["matmul:%s:%d:%d:%d:0:0" % (dt, t, 3 * d, d),
              "matmul:%s:%d:%d:%d:0:0" % (dt, t, 4 * d, d),
              "matmul:%s:%d:%d:%d:0:0" % (dt, t, d, 4 * d),
              "matmul:%s:%d:%d:%d:1:0" % (dt, d, 4 * d, t),
              "matmul:%s:%d:%d:%d:0:1" % (dt, t, v, d)]
    c += ["copy:%d" % (1 << 28), "softmax:%d:1024" % (8 * 12 * 1024),
          "layer_norm:%d:%d" % (t, d), "adam:124439808", "add:%d" % (1 << 28)]
    return c


def small_cases():
    return ["matmul:f32:256:256:256:0:0", "matmul:bf16:256:256:256:0:0",
            "matmul:f32:64:96:128:1:0", "matmul:f32:64:96:128:0:1",
            "copy:1048576", "softmax:1024:1024", "layer_norm:512:768",
            "adam:1048576", "add:1048576"]


class Case:
    """A parsed CASE: kind, dtype, dims and the work it does (FLOP for
    matmul, bytes read + written otherwise, counted as the C driver does)."""

    def __init__(self, spec):
        self.spec = spec
        f = spec.split(":")
        self.kind = f[0]
        try:
            if self.kind == "matmul" and len(f) == 7 and f[1] in ("f32", "bf16"):
                self.dtype = f[1]
                self.m, self.n, self.k, ta, tb = (int(x) for x in f[2:])
                self.ta, self.tb = bool(ta), bool(tb)
                self.work = 2.0 * self.m * self.n * self.k
            elif self.kind in ("softmax", "layer_norm") and len(f) == 3:
                self.dtype = "f32"
                self.m, self.n = int(f[1]), int(f[2])
                if self.kind == "softmax":
                    self.work = 2.0 * self.m * self.n * 4
                else:
                    self.work = (2.0 * self.m * self.n + 2 * self.n +
                                 2 * self.m) * 4
            elif self.kind in ("adam", "add", "copy") and len(f) == 2:
                self.dtype = "f32"
                self.n = int(f[1])
                self.work = {"adam": 7, "add": 3, "copy": 2}[self.kind] * \
                    4.0 * self.n
            else:
                raise ValueError
        except ValueError:
            raise ValueError("bad case '%s' (see --help)" % spec)
        if self.kind == "matmul" and min(self.m, self.n, self.k) < 1 or \
                self.kind != "matmul" and self.n < 1:
            raise ValueError("bad case '%s': empty" % spec)

    def rate(self, ms):
        if not ms > 0:
            return "-"
        if self.kind == "matmul":
            return "%.1f TFLOP/s" % (self.work / (ms * 1e-3) / 1e12)
        return "%.0f GB/s" % (self.work / (ms * 1e-3) / 1e9)


class CheckFailed(Exception):
    pass


def finite(torch, t, what):
    if not bool(torch.isfinite(t).all()):
        raise CheckFailed("%s has NaN or Inf" % what)


def sample_indices(n, count, seed):
    """Deterministic sample of `count` indices in [0, n), both ends first."""
    out = [0, n - 1]
    x = seed
    while len(out) < count:
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append((x >> 33) % n)
    return out[:count]


def setup_matmul(c, dev, torch):
    dt = torch.float32 if c.dtype == "f32" else torch.bfloat16
    a = (torch.rand((c.k, c.m) if c.ta else (c.m, c.k), device=dev) * 2 - 1)
    b = (torch.rand((c.n, c.k) if c.tb else (c.k, c.n), device=dev) * 2 - 1)
    a, b = a.to(dt), b.to(dt)
    A = a.t() if c.ta else a
    B = b.t() if c.tb else b
    note = "ok"
    if dt == torch.float32:
        out = torch.empty((c.m, c.n), device=dev, dtype=torch.float32)

        def fn():
            return torch.mm(A, B, out=out)
    else:
        try:
            torch.mm(A[:1, :], B[:, :1], out_dtype=torch.float32)

            def fn():
                return torch.mm(A, B, out_dtype=torch.float32)
        except (TypeError, RuntimeError) as e:
            note = ("ok; bf16 output (torch.mm(..., out_dtype=float32) is not "
                    "available here: %s)" % str(e).splitlines()[0][:80])

            def fn():
                return torch.mm(A, B)

    def check(res):
        finite(torch, res, "the product")
        # f32: within a bound a TF32 product would exceed (see
        # kernels_vs_torch.c); a bf16 output adds its own rounding.
        rel = 4e-6 if dt == torch.float32 else 1e-5
        bf16_out = res.dtype == torch.bfloat16
        rows = sample_indices(c.m, 16, 1)
        cols = sample_indices(c.n, 16, 2)
        for i, j in zip(rows, cols):
            p = A[i, :].double() * B[:, j].double()
            want, mag = float(p.sum()), float(p.abs().sum())
            got = float(res[i, j])
            tol = rel * mag + (abs(want) * 2.0 ** -8 if bf16_out else 0.0)
            if not abs(got - want) <= tol:
                raise CheckFailed(
                    "out[%d,%d] = %.9g, want %.9g (tolerance %.3g%s)" %
                    (i, j, got, want, tol,
                     "; TF32?" if dt == torch.float32 else ""))
    return fn, check, note, (a, b)


def setup_softmax(c, dev, torch):
    x = (torch.rand((c.m, c.n), device=dev) * 2 - 1) * 4

    def fn():
        return torch.softmax(x, -1)

    def check(res):
        finite(torch, res, "y")
        for i in sample_indices(c.m, 8, 3):
            e = (x[i].double() - x[i].double().max()).exp()
            want = e / e.sum()
            err = float(((res[i].double() - want).abs() -
                         5e-5 * want - 1e-12).max())
            if not err <= 0:
                raise CheckFailed("row %d differs from float64" % i)
    return fn, check, "ok", (x,)


def setup_layer_norm(c, dev, torch):
    x = (torch.rand((c.m, c.n), device=dev) * 2 - 1) * 3 + 1
    w = 1 + 0.5 * (torch.rand(c.n, device=dev) * 2 - 1)
    b = 0.5 * (torch.rand(c.n, device=dev) * 2 - 1)

    def fn():
        return torch.native_layer_norm(x, [c.n], w, b, 1e-5)

    def check(res):
        y = res[0]
        finite(torch, y, "y")
        for i in sample_indices(c.m, 8, 4):
            xi = x[i].double()
            mean = xi.mean()
            var = ((xi - mean) ** 2).mean()  # biased
            want = (xi - mean) / (var + 1e-5).sqrt() * w.double() + b.double()
            err = float(((y[i].double() - want).abs() -
                         2e-5 * (1 + want.abs())).max())
            if not err <= 0:
                raise CheckFailed("row %d differs from float64" % i)
    return fn, check, "ok", (x, w, b)


def setup_adam(c, dev, torch):
    p = torch.nn.Parameter(torch.rand(c.n, device=dev) * 2 - 1)
    p.grad = torch.rand(c.n, device=dev) * 2 - 1
    kw = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
    note = "ok"
    if dev.type == "cuda":
        try:
            opt = torch.optim.Adam([p], fused=True, **kw)
            note = "ok; fused Adam"
        except (TypeError, RuntimeError) as e:
            opt = torch.optim.Adam([p], **kw)
            note = "ok; default Adam (no fused: %s)" % str(e).splitlines()[0][:60]
    else:
        opt = torch.optim.Adam([p], foreach=False, **kw)

    def fn():
        opt.step()
        return p

    def check(res):
        finite(torch, res, "w")
        st = opt.state[p]
        finite(torch, st["exp_avg"], "m")
        finite(torch, st["exp_avg_sq"], "v")
    return fn, check, note, (p,)


def setup_add(c, dev, torch):
    a = torch.rand(c.n, device=dev) * 2 - 1
    b = torch.rand(c.n, device=dev) * 2 - 1
    out = torch.empty_like(a)

    def fn():
        return torch.add(a, b, out=out)

    def check(res):
        finite(torch, res, "a + b")
        idx = torch.tensor(sample_indices(c.n, 64, 5), device=dev)
        if not torch.equal(res[idx], a[idx] + b[idx]):
            raise CheckFailed("a + b differs")
    return fn, check, "ok", (a, b, out)


def setup_copy(c, dev, torch):
    src = torch.rand(c.n, device=dev)
    dst = torch.empty_like(src)

    def fn():
        return dst.copy_(src)

    def check(res):
        idx = torch.tensor(sample_indices(c.n, 64, 6), device=dev)
        if not torch.equal(res[idx], src[idx]):
            raise CheckFailed("the copy differs")
    return fn, check, "ok", (src, dst)


SETUP = {"matmul": setup_matmul, "softmax": setup_softmax,
         "layer_norm": setup_layer_norm, "adam": setup_adam, "add": setup_add,
         "copy": setup_copy}


def time_fn(fn, flush, args, dev, torch):
    """Median and minimum ms of args.iters runs, each after a flush."""
    cuda = dev.type == "cuda"
    for i in range(args.warmup):
        flush.fill_(i & 0xFF)
        fn()
    times = []
    if cuda:
        ev = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True)) for _ in range(args.iters)]
        for i, (s, e) in enumerate(ev):
            flush.fill_(i & 0xFF)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in ev]
    else:
        for i in range(args.iters):
            flush.fill_(i & 0xFF)
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times)


def run_case(c, flush, args, dev, torch):
    """(median_ms, min_ms, note) or raises."""
    torch.manual_seed(1)
    fn, check, note, keep = SETUP[c.kind](c, dev, torch)
    res = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    check(res)
    del res
    med, mn = time_fn(fn, flush, args, dev, torch)
    del keep
    return med, mn, note


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__[len(__doc__.split("\n\n")[0]):].strip())
    p.add_argument("cases", nargs="*", metavar="CASE")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--flush-bytes", type=int, default=0,
                   help="the L2 flush buffer (default: 256 MiB or twice the "
                        "L2 cache, whichever is more)")
    p.add_argument("--small", action="store_true",
                   help="small cases, for --device cpu")
    p.add_argument("--table", action="store_true",
                   help="also print a table")
    args = p.parse_args()
    if args.iters < 1 or args.warmup < 0 or args.flush_bytes < 0:
        p.error("--iters must be >= 1, --warmup and --flush-bytes >= 0")
    specs = args.cases or (small_cases() if args.small else default_cases())
    try:
        cases = [Case(s) for s in specs]
    except ValueError as e:
        p.error(str(e))
    try:
        import torch
    except ImportError as e:
        print("info torch unavailable: %s" % e, flush=True)
        sys.exit(3)
    dev = torch.device(args.device)
    l2 = 0
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            print("info torch %s: CUDA is not available" % torch.__version__,
                  flush=True)
            sys.exit(3)
        prop = torch.cuda.get_device_properties(0)
        l2 = getattr(prop, "L2_cache_size", 0)
        print("info torch %s (CUDA %s) on %s, compute capability %d.%d, %d "
              "SMs, L2 %.1f MiB" %
              (torch.__version__, torch.version.cuda, prop.name, prop.major,
               prop.minor, prop.multi_processor_count, l2 / 2.0 ** 20),
              flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = \
                False
        except (AttributeError, AssertionError):
            pass
    else:
        print("info torch %s on the CPU (%d threads): a check of this script, "
              "not a measurement to compare" %
              (torch.__version__, torch.get_num_threads()), flush=True)
    torch.set_float32_matmul_precision("highest")
    print("info f32 matmul: allow_tf32 = %s, float32 matmul precision %s" %
          (torch.backends.cuda.matmul.allow_tf32,
           torch.get_float32_matmul_precision()), flush=True)
    flush_bytes = args.flush_bytes or max(256 << 20, 2 * l2)
    print("info %d timed runs after %d warm-up, %s, a %.0f MiB fill before "
          "each" % (args.iters, args.warmup,
                    "CUDA events" if dev.type == "cuda" else "perf_counter",
                    flush_bytes / 2.0 ** 20), flush=True)
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=dev)
    failed = 0
    rows = []
    for c in cases:
        try:
            med, mn, note = run_case(c, flush, args, dev, torch)
            print("result %s %.6f %.6f %s" % (c.spec, med, mn, note),
                  flush=True)
            rows.append((c, med, note))
        except Exception as e:  # noqa: BLE001 -- reported, then the next case
            failed += 1
            why = "%s: %s" % (type(e).__name__,
                              (str(e).splitlines() or [""])[0][:200])
            print("result %s nan nan FAILED: %s" % (c.spec, why), flush=True)
            rows.append((c, math.nan, "FAILED: " + why))
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    if args.table:
        print("\n%-34s %10s %14s  %s" % ("case", "ms", "rate", "note"))
        for c, med, note in rows:
            print("%-34s %10s %14s  %s" %
                  (c.spec, "%.3f" % med if med > 0 else "-", c.rate(med),
                   note))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
