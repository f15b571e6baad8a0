"""JAX peer of bench/cpu_peers.c: the examples' MLP and GPT trained by a
jitted step on XLA:CPU, one device or several host devices.

  cpu_jax.py MODEL LAYOUT [--devices N] [--threads T] [--steps 20]
             [--warmup 3] [sizes]
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

Timing: --warmup untimed steps (compilation included), then --steps steps,
each from the call to the loss on the host. Prints one line:
  "jax MODEL LAYOUT devices N threads T ms_per_step MEDIAN min MIN steps S
   loss L"
Bad arguments: a message on stderr, exit status 2."""
import argparse
import os
import statistics
import sys
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=["mlp", "gpt"])
    p.add_argument("layout", choices=["single", "dp", "tp"])
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int)
    p.add_argument("--in", dest="inp", type=int, default=1024)
    p.add_argument("--hidden", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float)
    a = p.parse_args()
    mlp = a.model == "mlp"
    a.batch = a.batch or (256 if mlp else 8)
    a.hidden = a.hidden or (1024 if mlp else 64)
    a.layers = a.layers or (4 if mlp else 2)
    a.lr = a.lr or (0.05 if mlp else 3e-3)

    def bad(msg):
        print("cpu_jax.py: " + msg, file=sys.stderr)
        sys.exit(2)

    if a.devices < 1 or a.threads < 0 or a.steps < 1 or a.warmup < 0:
        bad("--devices, --steps >= 1; --threads, --warmup >= 0")
    if a.layout != "single" and a.devices < 2:
        bad("%s needs --devices >= 2" % a.layout)
    if a.layout == "dp" and a.batch % a.devices:
        bad("dp: batch %d is not a multiple of %d devices" % (a.batch, a.devices))
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

    def update(ps, state, grads):
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

    return params, None, (x, y), loss_fn, update, tp_spec


def gpt_model(a, jax, jnp):
    B, S, V, D, H, L = a.batch, a.seq, a.vocab, a.hidden, a.heads, a.layers
    key = jax.random.PRNGKey(1)

    def normal(shape, std):
        nonlocal key
        key, k = jax.random.split(key)
        return jax.random.normal(k, shape, jnp.float32) * std

    blocks = []
    for _ in range(L):
        blocks.append({
            "ln1_g": jnp.ones((D,)), "ln1_b": jnp.zeros((D,)),
            "wq": normal((D, D), 0.02), "wk": normal((D, D), 0.02),
            "wv": normal((D, D), 0.02),
            "wo": normal((D, D), 0.02 / (2 * L) ** 0.5),
            "ln2_g": jnp.ones((D,)), "ln2_b": jnp.zeros((D,)),
            "fc1": normal((D, 4 * D), 0.02), "fc1_b": jnp.zeros((4 * D,)),
            "fc2": normal((4 * D, D), 0.02), "fc2_b": jnp.zeros((D,))})
    params = {"wte": normal((V, D), 0.02), "wpe": normal((S, D), 0.01),
              "lnf_g": jnp.ones((D,)), "lnf_b": jnp.zeros((D,)),
              "blocks": blocks}
    key, kt, kf = jax.random.split(key, 3)
    tokens = jax.random.randint(kt, (B, S + 1), 0, V)
    fmap = jax.random.randint(kf, (V,), 0, V)
    inputs, targets = tokens[:, 1:], fmap[tokens[:, 1:]]
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
            q, k, v = heads(h @ p["wq"]), heads(h @ p["wk"]), heads(h @ p["wv"])
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
    devices = jax.devices()[:1 if a.layout == "single" else a.devices]
    mesh = Mesh(devices, ("d",))

    def on(spec):
        return NamedSharding(mesh, spec)

    is_spec = lambda s: isinstance(s, P)
    if a.layout == "tp":
        p_shard = jax.tree_util.tree_map(on, tp_spec(P), is_leaf=is_spec)
    else:
        p_shard = jax.tree_util.tree_map(lambda _: on(P()), params)
    d_spec = P("d") if a.layout == "dp" else P()
    d_shard = tuple(on(d_spec) for _ in data)
    params = jax.device_put(params, p_shard)
    data = tuple(jax.device_put(x, s) for x, s in zip(data, d_shard))
    if state is not None:  # Adam's moments take their parameter's layout
        state = {"m": jax.device_put(state["m"], p_shard),
                 "v": jax.device_put(state["v"], p_shard),
                 "t": jax.device_put(state["t"], on(P()))}

    def step(ps, st, data):
        loss, grads = jax.value_and_grad(loss_fn)(ps, *data)
        ps, st = update(ps, st, grads)
        return ps, st, loss

    step = jax.jit(step, donate_argnums=(0, 1))
    times, loss = [], float("nan")
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        params, state, l = step(params, state, data)
        loss = float(l)
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    print("jax %s %s devices %d threads %d ms_per_step %.3f min %.3f steps %d "
          "loss %.6g" % (a.model, a.layout, len(devices), a.threads,
                         statistics.median(times), min(times), a.steps, loss))


if __name__ == "__main__":
    main()
