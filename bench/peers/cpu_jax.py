"""JAX peer of bench/cpu_peers.c: the examples' MLP and GPT trained by a
jitted step on XLA:CPU, one device or several host devices.

  cpu_jax.py MODEL LAYOUT [--devices N] [--threads T] [--steps 20]
             [--warmup 3] [--verbose] [sizes]
    MODEL    mlp | gpt
    LAYOUT   single | dp | tp
    --devices N   XLA host devices (XLA_FLAGS
                  --xla_force_host_platform_device_count=N); dp and tp use
                  all of them on a one-axis mesh, single the first
    --threads T   0: XLA's own thread pool (every core); 1: one thread (no
                  multi-threaded Eigen, one intra-op thread, the process
                  bound to one CPU); T > 1: the process bound to T CPUs
    mlp sizes     --batch 256 --in 1024 --hidden 1024 --layers 4
                  --classes 10 --lr 0.05
    gpt sizes     --batch 8 --seq 32 --vocab 64 --hidden 64 --heads 4
                  --layers 2 --lr 3e-3 (examples/gpt's defaults)

The models are those of examples/mlp (hidden Linear + ReLU layers, a
linear head, softmax cross-entropy, plain SGD) and examples/gpt with a
tied head (bench/peers/gpt_torch.py's docstring: pre-LN blocks, causal
attention with explicit ops, GELU MLP, Adam), on one fixed random batch.
Layouts use NamedSharding on a mesh with one axis "d": dp splits the batch
and replicates the parameters; tp splits Megatron-style (mlp: hidden layers
alternately by columns and by rows; gpt: Wq, Wk, Wv and fc1 by columns, Wo
and fc2 by rows), the data replicated. XLA's SPMD partitioner inserts the
collectives.

The step is one jitted function (forward, backward, optimizer update) that
donates the parameters and optimizer state, so XLA updates them in place;
its input and output shardings are pinned to the layout above.

Timing: --warmup untimed steps (compilation included), then --steps steps,
each from the call to the loss on the host (float(loss)). Prints one line
on stdout, MEDIAN and MIN in ms, L the last step's loss:
  "jax MODEL LAYOUT devices N threads T ms_per_step MEDIAN min MIN steps S
   loss L"
Everything else (JAX's warnings; with --verbose every step's loss) goes to
stderr. Exit status 0; 1 when the last loss is not finite; 2 for bad
arguments (dp or tp on one device, a batch that dp cannot split evenly,
hidden or heads that tp cannot split evenly)."""
import argparse
import math
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__[len(__doc__.split("\n\n")[0]):].strip())
    p.add_argument("model", choices=["mlp", "gpt"])
    p.add_argument("layout", choices=["single", "dp", "tp"])
    p.add_argument("--devices", type=int, default=1,
                   help="XLA host devices (dp and tp: >= 2)")
    p.add_argument("--threads", type=int, default=0,
                   help="0: XLA's choice; T: bound to the first T CPUs")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--verbose", action="store_true",
                   help="every step's loss on stderr")
    # Sizes whose default depends on the model are None until parsed.
    p.add_argument("--batch", type=int, help="mlp 256, gpt 8")
    p.add_argument("--hidden", type=int, help="mlp 1024, gpt 64")
    p.add_argument("--layers", type=int, help="mlp 4, gpt 2")
    p.add_argument("--lr", type=float, help="mlp 0.05, gpt 3e-3")
    p.add_argument("--in", dest="inp", type=int, default=1024, help="mlp")
    p.add_argument("--classes", type=int, default=10, help="mlp")
    p.add_argument("--seq", type=int, default=32, help="gpt")
    p.add_argument("--vocab", type=int, default=64, help="gpt")
    p.add_argument("--heads", type=int, default=4, help="gpt")
    a = p.parse_args()
    mlp = a.model == "mlp"
    for name, m, g in (("batch", 256, 8), ("hidden", 1024, 64),
                       ("layers", 4, 2), ("lr", 0.05, 3e-3)):
        if getattr(a, name) is None:
            setattr(a, name, m if mlp else g)

    def bad(msg):
        print("cpu_jax.py: " + msg, file=sys.stderr)
        sys.exit(2)

    if a.devices < 1 or a.threads < 0 or a.steps < 1 or a.warmup < 0:
        bad("want --devices, --steps >= 1 and --threads, --warmup >= 0")
    if min(a.batch, a.hidden, a.layers, a.inp, a.seq, a.heads) < 1 or \
            a.classes < 2 or a.vocab < 2:
        bad("want sizes >= 1 and classes, vocab >= 2")
    if a.layout != "single" and a.devices < 2:
        bad("%s needs --devices >= 2" % a.layout)
    if a.layout == "dp" and a.batch % a.devices:
        bad("dp: batch %d is not a multiple of %d devices" %
            (a.batch, a.devices))
    if a.layout == "tp" and (a.hidden % a.devices or
                             (not mlp and a.heads % a.devices)):
        bad("tp: hidden %d (and heads) not a multiple of %d devices" %
            (a.hidden, a.devices))
    if not mlp and a.hidden % a.heads:
        bad("hidden %d is not a multiple of %d heads" % (a.hidden, a.heads))
    return a


def configure(a):
    """XLA reads its flags when jax is imported: set them first."""
    flags = [os.environ.get("XLA_FLAGS", ""),
             "--xla_force_host_platform_device_count=%d" % a.devices]
    if a.threads == 1:
        flags += ["--xla_cpu_multi_thread_eigen=false",
                  "intra_op_parallelism_threads=1"]
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if f)
    # The affinity is what holds XLA to T cores (it sizes its thread pools
    # from the CPUs the process may run on; the bare word above is no
    # "--" flag and XLA's parser passes over it). Set before jax starts.
    if a.threads > 0:
        cpus = sorted(os.sched_getaffinity(0))[:a.threads]
        os.sched_setaffinity(0, set(cpus))


def mlp_model(a, jax, jnp):
    sizes = [a.inp] + [a.hidden] * a.layers + [a.classes]
    key = jax.random.PRNGKey(1)
    params = []
    for i in range(len(sizes) - 1):
        key, k = jax.random.split(key)
        w = jax.random.normal(k, (sizes[i], sizes[i + 1]), jnp.float32)
        params.append({"w": w / jnp.sqrt(sizes[i]),
                       "b": jnp.zeros((sizes[i + 1],), jnp.float32)})
    key, kx, ky = jax.random.split(key, 3)
    x = jax.random.normal(kx, (a.batch, a.inp), jnp.float32)
    y = jax.random.randint(ky, (a.batch,), 0, a.classes)

    def loss_fn(ps, x, y):
        h = x
        for p in ps[:-1]:
            h = jax.nn.relu(h @ p["w"] + p["b"])
        logits = h @ ps[-1]["w"] + ps[-1]["b"]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def update(ps, state, grads):  # plain SGD, no state
        return jax.tree_util.tree_map(lambda p, g: p - a.lr * g, ps,
                                      grads), state

    def tp_spec(P):
        # Hidden layers alternate: columns (w, b split), then rows (w
        # split, b whole); the head is replicated.
        specs = []
        for i in range(len(params)):
            if i == len(params) - 1:
                specs.append({"w": P(), "b": P()})
            elif i % 2 == 0:
                specs.append({"w": P(None, "d"), "b": P("d")})
            else:
                specs.append({"w": P("d", None), "b": P()})
        return specs

    return params, {}, (x, y), loss_fn, update, tp_spec


def gpt_model(a, jax, jnp):
    B, S, V, D, H, L = a.batch, a.seq, a.vocab, a.hidden, a.heads, a.layers
    key = jax.random.PRNGKey(1)

    def normal(shape, std):
        nonlocal key
        key, k = jax.random.split(key)
        return jax.random.normal(k, shape, jnp.float32) * std

    proj = 0.02 / (2 * L) ** 0.5  # gpt_torch.py's std for Wo and fc2
    blocks = []
    for _ in range(L):
        blocks.append({
            "ln1_g": jnp.ones((D,)), "ln1_b": jnp.zeros((D,)),
            "wq": normal((D, D), 0.02), "wk": normal((D, D), 0.02),
            "wv": normal((D, D), 0.02),
            "wo": normal((D, D), proj),
            "ln2_g": jnp.ones((D,)), "ln2_b": jnp.zeros((D,)),
            "fc1": normal((D, 4 * D), 0.02), "fc1_b": jnp.zeros((4 * D,)),
            "fc2": normal((4 * D, D), proj), "fc2_b": jnp.zeros((D,))})
    params = {"wte": normal((V, D), 0.02), "wpe": normal((S, D), 0.01),
              "lnf_g": jnp.ones((D,)), "lnf_b": jnp.zeros((D,)),
              "blocks": blocks}
    key, kt, kf = jax.random.split(key, 3)
    tokens = jax.random.randint(kt, (B, S + 1), 0, V)
    fmap = jax.random.randint(kf, (V,), 0, V)
    # gpt_torch.py's task: read t[:, 1:], predict f(t[:, i]) at position i.
    inputs, targets = tokens[:, 1:], fmap[tokens[:, :-1]]
    mask = jnp.tril(jnp.ones((S, S), bool))

    def ln(x, g, b):
        mu = jnp.mean(x, -1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * g + b

    def heads(t):  # [B, S, D] -> [B, H, S, hd]
        return t.reshape(B, S, H, D // H).transpose(0, 2, 1, 3)

    def loss_fn(ps, inputs, targets):
        x = ps["wte"][inputs] + ps["wpe"]
        for p in ps["blocks"]:
            h = ln(x, p["ln1_g"], p["ln1_b"])
            q, k, v = (heads(h @ p[w]) for w in ("wq", "wk", "wv"))
            s = q @ k.transpose(0, 1, 3, 2) / (D // H) ** 0.5
            s = jnp.where(mask, s, -jnp.inf)
            o = jax.nn.softmax(s, -1) @ v
            x = x + o.transpose(0, 2, 1, 3).reshape(B, S, D) @ p["wo"]
            h = ln(x, p["ln2_g"], p["ln2_b"])
            h = jax.nn.gelu(h @ p["fc1"] + p["fc1_b"], approximate=True)
            x = x + h @ p["fc2"] + p["fc2_b"]
        x = ln(x, ps["lnf_g"], ps["lnf_b"])
        logp = jax.nn.log_softmax(x @ ps["wte"].T)
        return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], -1))

    # m and v each their own buffers: the step donates both.
    state = {"m": jax.tree_util.tree_map(jnp.zeros_like, params),
             "v": jax.tree_util.tree_map(jnp.zeros_like, params),
             "t": jnp.zeros((), jnp.float32)}

    def update(ps, st, grads):  # Adam, betas (0.9, 0.999), eps 1e-8
        t = st["t"] + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, st["m"],
                                   grads)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g,
                                   st["v"], grads)
        step = a.lr / (1 - 0.9 ** t)
        bc2 = jnp.sqrt(1 - 0.999 ** t)
        ps = jax.tree_util.tree_map(
            lambda p, m, v: p - step * m / (jnp.sqrt(v) / bc2 + 1e-8), ps, m,
            v)
        return ps, {"m": m, "v": v, "t": t}

    def tp_spec(P):
        cols, rows = P(None, "d"), P("d", None)
        block = {"ln1_g": P(), "ln1_b": P(), "wq": cols, "wk": cols,
                 "wv": cols, "wo": rows, "ln2_g": P(), "ln2_b": P(),
                 "fc1": cols, "fc1_b": P("d"), "fc2": rows, "fc2_b": P()}
        return {"wte": P(), "wpe": P(), "lnf_g": P(), "lnf_b": P(),
                "blocks": [dict(block) for _ in range(L)]}

    return params, state, (inputs, targets), loss_fn, update, tp_spec


def main():
    a = parse()
    configure(a)
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    build = mlp_model if a.model == "mlp" else gpt_model
    params, state, data, loss_fn, update, tp_spec = build(a, jax, jnp)
    # single runs on the first device whatever --devices says.
    devices = jax.devices()[:1 if a.layout == "single" else a.devices]
    mesh = Mesh(devices, ("d",))

    def on(spec):
        return NamedSharding(mesh, spec)

    if a.layout == "tp":
        p_shard = jax.tree_util.tree_map(
            on, tp_spec(P), is_leaf=lambda s: isinstance(s, P))
    else:
        p_shard = jax.tree_util.tree_map(lambda _: on(P()), params)
    # Adam's moments take their parameter's layout (the mlp has no state).
    s_shard = {k: on(P()) if k == "t" else p_shard for k in state}
    d_shard = tuple(on(P("d") if a.layout == "dp" else P()) for _ in data)
    params = jax.device_put(params, p_shard)
    state = jax.device_put(state, s_shard)
    data = jax.device_put(data, d_shard)

    def step(ps, st, data):
        loss, grads = jax.value_and_grad(loss_fn)(ps, *data)
        ps, st = update(ps, st, grads)
        return ps, st, loss

    # Outputs pinned to the inputs' layout: the donated buffers are reused
    # and every call sees the same shardings (no resharding, one compile).
    step = jax.jit(step, donate_argnums=(0, 1),
                   in_shardings=(p_shard, s_shard, d_shard),
                   out_shardings=(p_shard, s_shard, on(P())))
    times, loss = [], float("nan")
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        params, state, l = step(params, state, data)
        loss = float(l)
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        if a.verbose:
            print("loss %d %.6f" % (i, loss), file=sys.stderr, flush=True)
    print("jax %s %s devices %d threads %d ms_per_step %.3f min %.3f steps %d "
          "loss %.6g" % (a.model, a.layout, a.devices, a.threads,
                         statistics.median(times), min(times), a.steps, loss),
          flush=True)
    sys.exit(0 if math.isfinite(loss) else 1)


if __name__ == "__main__":
    main()
