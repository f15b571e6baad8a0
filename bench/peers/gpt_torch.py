#!/usr/bin/python3
"""PyTorch peer of bench/gpt_gpu_vs_torch.c: the decoder-only transformer of
examples/gpt/model.c, trained on the same synthetic task with the same
optimizer, timed per training step.

  gpt_torch.py [--device cuda|cpu] [--batch 8] [--seq 1024] [--layers 12]
               [--hidden 768] [--heads 12] [--vocab 50257] [--untied]
               [--lr 6e-4] [--optimizer adam|sgd] [--steps 20] [--warmup 3]
               [--attention math|sdpa] [--dtype f32|bf16] [--fused-adam]
               [--save-safetensors PATH [--save-batch INPUTS.npy,TARGETS.npy]]

The model, as examples/gpt/model.c builds it:
  data      tokens t[B, S+1] uniform in [0, V), new every step; the model
            reads t[:, 1:] and predicts at position i f(t[:, i]) for a fixed
            random map f (a non-trainable table of V entries)
  embedding x = wte[inputs] + wpe, wte [V, D] ~ N(0, 0.02), wpe [S, D] ~
            N(0, 0.01)
  blocks    `layers` pre-LN blocks: x = x + attn(ln1(x)), x = x + mlp(ln2(x))
  attn      q, k, v = h Wq, h Wk, h Wv, no biases (sluice keeps each as
            [H, D, hd]; here a [D, D] matrix, the same numbers and FLOPs),
            causal softmax(q k^T / sqrt(hd)) v per head, then the output
            projection Wo ([H, hd, D] in sluice, summed over heads = [D, D]
            here), no bias; Wq, Wk, Wv ~ N(0, 0.02), Wo ~ N(0, 0.02 /
            sqrt(2 layers))
  mlp       fc2(gelu(fc1(h))), fc1 [D, 4D] + bias, fc2 [4D, D] + bias, GELU
            with the tanh approximation (GPT-2's, sluice's gelu)
  norms     layer norm over D with gamma and beta, eps 1e-5; a final one
  head      tied to the token embedding (logits = x wte^T) unless --untied
            (a separate [D, V] matrix)
  loss      mean cross-entropy over the B*S positions
  optimizer Adam(lr, betas (0.9, 0.999), eps 1e-8), no weight decay, no
            clipping, on every parameter (torch.optim.Adam's default
            implementation, foreach on CUDA; --fused-adam for the fused one);
            --optimizer sgd: plain SGD(lr), no momentum (examples/gpt
            --optimizer sgd)

Choices that must match what sluice runs:
  --dtype f32 (the default) is what examples/gpt runs today: every tensor
            and every matmul f32, and the matmuls true f32
            (torch.backends.cuda.matmul.allow_tf32 = False, as sluice's
            cublasSgemm in cuBLAS's default math mode). examples/gpt has no
            flag for bf16 matmuls yet; --dtype bf16 (the forward under
            torch.autocast(bfloat16): bf16 matmuls, f32 weights and
            optimizer) is there for when it does, and must not be compared
            with an f32 sluice run.
  --attention math (the default) computes attention with explicit ops, as
            sluice's sl_scaled_dot_product_attention does (batch matmul,
            scale, causal mask to -inf, softmax, batch matmul), keeping the
            [B, H, S, S] scores; sdpa calls
            torch.nn.functional.scaled_dot_product_attention(is_causal=True),
            PyTorch's fused kernels (what a PyTorch user would write).

Timing: --warmup untimed steps, then --steps steps, each timed from a
torch.cuda.synchronize() to the loss's .item() (one step: data, forward,
backward, optimizer; the loss fetched to the host, as the C driver fetches
sluice's); the median is reported.

--save-safetensors PATH writes the initial parameters, under the names of
GPT.state_dict() ("wte", "wpe", "blocks.L.ln1_g", "blocks.L.wq", ...,
"lnf_g", "head"), as a safetensors file (bench/peers/st_file.py; no
safetensors package needed) that examples/gpt reads with --load (the name
mapping is in docs/examples.md).

--save-batch INPUTS.npy,TARGETS.npy (with --save-safetensors) also writes
the batches of the run, warm-up steps included, as .npy files: the inputs
t[:, 1:] and the targets f(t[:, :-1]), int64 [(warmup + steps) * batch,
seq], step k's batch in rows [k * batch, (k + 1) * batch). examples/gpt
--load PATH --data INPUTS.npy,TARGETS.npy (with the peer's sizes,
--optimizer and --lr) reads them in the same order, so its step k sees
PyTorch's step k; the losses are then printed with 9 significant digits.

--init-scale K multiplies the standard deviation of every random initial
weight by K (default 1). At 1 the initial prediction is nearly uniform and
the first loss nearly ln(vocab) whatever the blocks compute (the GELU's
erf and tanh forms differ there by 1e-7 relative); a comparison of two
implementations wants larger weights, e.g. K = 20 (tests/examples/
test_ckpt.c).

--threads T sets torch.set_num_threads(T) (default: PyTorch's own choice;
1 per process with --ddp). --ddp --world N (CPU only) trains data
parallel in N processes over gloo on 127.0.0.1 (--port): the global
--batch split evenly, each rank's gradients averaged with one all-reduce of
all of them per step after the backward pass (what DDP does, without its
overlap: the model is not an nn.Module); rank 0 prints.

Output, one line each:
  info TEXT
  params N TENSORS        trainable parameters and parameter tensors
  loss STEP VALUE         every step's loss (warm-up included)
  result attention=A dtype=D ms_per_step MEDIAN min MIN steps N
         peak_gib G [world W]   (one line; world with --ddp)
Exit status 0, 1 when a loss is not finite, 2 for bad arguments, 3 when
torch or the device is unavailable."""
import argparse
import math
import statistics
import sys
import time


class GPT:
    """The model's parameters and forward pass (a plain function of them, as
    the C example builds its graph)."""

    def __init__(self, a, dev, torch):
        nn = torch.nn
        D, H, V, S, L = a.hidden, a.heads, a.vocab, a.seq, a.layers
        self.a, self.torch = a, torch
        self.hd = D // H
        # a.tp > 1 (memory_torch.py --tp): one rank of Megatron tensor
        # parallelism over a.tp ranks: its H / tp heads of Q, K, V and the
        # output projection, its 4D / tp columns of fc1 and rows of fc2, the
        # rest whole. The all-reduces closing the attention and the MLP
        # change no sizes, so the rank's memory is this model's.
        tp = getattr(a, "tp", 1)
        self.heads = H // tp
        Dl, Fl = self.heads * self.hd, 4 * D // tp

        def normal(shape, std):
            return nn.Parameter(torch.randn(shape, device=dev) *
                                (std * a.init_scale))

        def const(shape, v):
            return nn.Parameter(torch.full(shape, float(v), device=dev))

        self.wte = normal((V, D), 0.02)
        self.wpe = normal((S, D), 0.01)
        self.blocks = []
        proj_std = 0.02 / math.sqrt(2.0 * L)
        for _ in range(L):
            self.blocks.append(dict(
                ln1_g=const((D,), 1), ln1_b=const((D,), 0),
                wq=normal((D, Dl), 0.02), wk=normal((D, Dl), 0.02),
                wv=normal((D, Dl), 0.02), wo=normal((Dl, D), proj_std),
                ln2_g=const((D,), 1), ln2_b=const((D,), 0),
                fc1_w=normal((D, Fl), 0.02), fc1_b=const((Fl,), 0),
                fc2_w=normal((Fl, D), proj_std), fc2_b=const((D,), 0)))
        self.lnf_g, self.lnf_b = const((D,), 1), const((D,), 0)
        self.head = None if a.tie else normal((D, V), 0.02)
        # The fixed map f of the task: not trained.
        self.next_map = torch.randint(0, V, (V,), device=dev)
        self.causal = torch.ones(S, S, dtype=torch.bool,
                                 device=dev).triu(1)

    def state_dict(self):
        """The parameters by name, in parameters() order."""
        import collections
        d = collections.OrderedDict([("wte", self.wte), ("wpe", self.wpe)])
        for i, b in enumerate(self.blocks):
            for k, v in b.items():
                d["blocks.%d.%s" % (i, k)] = v
        d["lnf_g"], d["lnf_b"] = self.lnf_g, self.lnf_b
        if self.head is not None:
            d["head"] = self.head
        return d

    def parameters(self):
        ps = [self.wte, self.wpe]
        for b in self.blocks:
            ps += list(b.values())
        ps += [self.lnf_g, self.lnf_b]
        if self.head is not None:
            ps.append(self.head)
        return ps

    def attention(self, h, b):
        torch, F = self.torch, self.torch.nn.functional
        B, S = h.shape[0], h.shape[1]
        H, hd = self.heads, self.hd

        def heads(t):  # [B, S, H * hd] -> [B, H, S, hd]
            return t.view(B, S, H, hd).transpose(1, 2)
        q, k, v = heads(h @ b["wq"]), heads(h @ b["wk"]), heads(h @ b["wv"])
        if self.a.attention == "sdpa":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            s = s.masked_fill(self.causal, float("-inf"))
            o = torch.softmax(s, -1) @ v
        return o.transpose(1, 2).reshape(B, S, H * hd) @ b["wo"]

    def loss(self, inputs, targets):
        torch, F = self.torch, self.torch.nn.functional
        D, V = self.a.hidden, self.a.vocab
        x = F.embedding(inputs, self.wte) + self.wpe
        for b in self.blocks:
            x = x + self.attention(
                F.layer_norm(x, (D,), b["ln1_g"], b["ln1_b"], 1e-5), b)
            h = F.layer_norm(x, (D,), b["ln2_g"], b["ln2_b"], 1e-5)
            h = F.gelu(h @ b["fc1_w"] + b["fc1_b"], approximate="tanh")
            x = x + (h @ b["fc2_w"] + b["fc2_b"])
        x = F.layer_norm(x, (D,), self.lnf_g, self.lnf_b, 1e-5)
        logits = x @ (self.wte.t() if self.head is None else self.head)
        return F.cross_entropy(logits.reshape(-1, V).float(),
                               targets.reshape(-1))


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__[len(__doc__.split("\n\n")[0]):].strip())
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--untied", dest="tie", action="store_false",
                   help="a separate head instead of wte^T")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--attention", choices=["math", "sdpa"], default="math")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--fused-adam", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--save-safetensors", metavar="PATH",
                   help="write the initial parameters to PATH (see above)")
    p.add_argument("--save-batch", metavar="INPUTS.npy,TARGETS.npy",
                   help="with --save-safetensors: the batches as .npy files")
    p.add_argument("--init-scale", type=float, default=1.0,
                   help="multiply every initial standard deviation by this "
                   "(see above)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--ddp", action="store_true",
                   help="data parallel in --world processes (CPU, gloo)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, default=29527)
    a = p.parse_args()
    if a.ddp and (a.device != "cpu" or a.world < 1 or a.batch % a.world or
                  a.save_safetensors):
        p.error("--ddp wants --device cpu, --world >= 1 dividing --batch, "
                "and no --save-safetensors")
    if a.save_batch is not None and (
            not a.save_safetensors or a.save_batch.count(",") != 1 or
            "" in a.save_batch.split(",")):
        p.error("--save-batch wants INPUTS.npy,TARGETS.npy and "
                "--save-safetensors")
    if a.optimizer == "sgd" and a.fused_adam:
        p.error("--fused-adam is for --optimizer adam")
    if min(a.batch, a.seq, a.layers, a.hidden, a.heads, a.steps) < 1 or \
            a.vocab < 2 or a.warmup < 0 or a.hidden % a.heads or \
            not 0 < a.init_scale < math.inf:
        p.error("want batch, seq, layers, hidden, heads, steps >= 1, vocab "
                ">= 2, warmup >= 0, hidden a multiple of heads and "
                "init-scale a finite number above 0")
    if not a.ddp:
        run(a, 0)
        return
    # Rank 0 runs in this process and prints; the others are spawned.
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    others = [ctx.Process(target=run, args=(a, r)) for r in range(1, a.world)]
    for q in others:
        q.start()
    run(a, 0)
    for q in others:
        q.join()
    if any(q.exitcode != 0 for q in others):
        sys.exit(1)


def run(a, rank):
    """Trains as the arguments say; rank > 0 only with --ddp (silent)."""
    try:
        import torch
    except ImportError as e:
        print("info torch unavailable: %s" % e, flush=True)
        sys.exit(3)
    if a.threads or a.ddp:
        torch.set_num_threads(a.threads or 1)
    dist = None
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group(
            "gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=rank,
            world_size=a.world)
    say = print if rank == 0 else (lambda *args, **kw: None)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("info torch %s: CUDA is not available" % torch.__version__,
              flush=True)
        sys.exit(3)
    if a.attention == "sdpa" and not hasattr(torch.nn.functional,
                                             "scaled_dot_product_attention"):
        print("info torch %s has no scaled_dot_product_attention" %
              torch.__version__, flush=True)
        sys.exit(3)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(a.seed)
    where = torch.cuda.get_device_name(0) if cuda else "the CPU"
    say("info torch %s%s on %s" %
          (torch.__version__, " (CUDA %s)" % torch.version.cuda if cuda else "",
           where), flush=True)
    say("info %d layers, hidden %d, %d heads, seq %d, vocab %d, batch %d, "
          "%s head; attention %s; dtype %s (matmul allow_tf32 = %s); %s "
          "lr %g%s" %
          (a.layers, a.hidden, a.heads, a.seq, a.vocab, a.batch,
           "tied" if a.tie else "untied", a.attention,
           a.dtype if a.dtype == "f32" else "bf16 autocast",
           torch.backends.cuda.matmul.allow_tf32,
           "Adam" if a.optimizer == "adam" else "SGD", a.lr,
           ", fused" if a.fused_adam else ""), flush=True)

    model = GPT(a, dev, torch)
    params = model.parameters()
    if a.save_safetensors:
        import st_file
        st_file.save(model.state_dict(), a.save_safetensors, torch,
                     {"format": "pt", "source": "bench/peers/gpt_torch.py"})
        print("info saved %d tensors to %s" %
              (len(model.state_dict()), a.save_safetensors), flush=True)
    say("params %d %d" % (sum(t.numel() for t in params), len(params)),
          flush=True)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr)
    else:
        kw = dict(lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)
        if a.fused_adam:
            kw["fused"] = True
        opt = torch.optim.Adam(params, **kw)
    if a.dtype == "bf16":
        amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)
    else:
        amp = None

    # Data parallel: each rank draws its own share of the batch.
    world = a.world if a.ddp else 1
    if a.ddp:
        torch.manual_seed(a.seed + 1000 * rank)

    def batch():
        t = torch.randint(0, a.vocab, (a.batch // world, a.seq + 1),
                          device=dev)
        return t[:, 1:], model.next_map[t[:, :-1]]

    # --save-batch: every step's batch drawn now (training draws no random
    # numbers, so they are the batches a run without it would see).
    batches = None
    if a.save_batch:
        import numpy
        batches = [batch() for _ in range(a.warmup + a.steps)]
        for path, j in zip(a.save_batch.split(","), (0, 1)):
            rows = torch.cat([b[j] for b in batches]).to(torch.int64)
            numpy.save(path, rows.cpu().numpy().astype("<i8"))
        print("info saved %d batches of %d x %d tokens to %s" %
              (len(batches), a.batch, a.seq, a.save_batch), flush=True)

    def step(i):
        inputs, targets = batches[i] if batches else batch()
        if amp is not None:
            with amp:
                loss = model.loss(inputs, targets)
        else:
            loss = model.loss(inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if dist:  # the ranks' mean gradient, as DDP's all-reduce gives
            flat = torch.cat([q.grad.reshape(-1) for q in params])
            dist.all_reduce(flat)
            flat /= world
            at = 0
            for q in params:
                q.grad.copy_(flat[at:at + q.numel()].view_as(q.grad))
                at += q.numel()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = []
    bad = False
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        loss = step(i).item()
        dt = time.perf_counter() - t0
        say(("loss %d %.9g" if batches else "loss %d %.6f") % (i, loss),
              flush=True)
        bad = bad or not math.isfinite(loss)
        if i >= a.warmup:
            times.append(dt * 1e3)
    peak = torch.cuda.max_memory_allocated() / 2.0 ** 30 if cuda else 0.0
    say("result attention=%s dtype=%s ms_per_step %.4f min %.4f steps %d "
        "peak_gib %.2f%s" %
        (a.attention, a.dtype, statistics.median(times), min(times),
         len(times), peak, " world %d" % world if a.ddp else ""), flush=True)
    if dist:
        dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
