#!/usr/bin/python3
"""PyTorch peer of bench/memory.c: what one training step of the examples'
models holds in memory under PyTorch on the CPU, split into what any
framework must hold, and PyTorch's measured peak.

  memory_torch.py mlp [--layers 4] [--hidden 1024] [--batch 256] [--in 1024]
                      [--classes 10] [--optimizer sgd|adam]
  memory_torch.py gpt [--layers 2] [--hidden 64] [--heads 4] [--seq 32]
                      [--vocab 64] [--batch 8] [--tie] [--optimizer adam|sgd]
                      [--tp N]

The models are those of the other peers, imported from them: mlp is
mlp_torch.build (hidden layers of Linear + ReLU, a linear head, softmax
cross-entropy; examples/mlp), gpt is gpt_torch.GPT with --attention math
(explicit attention keeping the [B, H, S, S] scores, as sluice computes it;
examples/gpt). The defaults are those of examples/mlp (SGD without
momentum) and examples/gpt (untied head, Adam), not GPT-2's. gpt --tp N
measures one rank of Megatron tensor parallelism over N ranks, as
examples/gpt --layout tp splits the model: the rank's heads/N heads of Q, K,
V and the output projection and its 4*hidden/N columns of fc1 and rows of
fc2, embeddings, norms and head whole (the all-reduces that close the
attention and the MLP change no sizes, so the rank runs alone). The mlp's
batch (x [batch, in] f32, labels [batch] int64) is made once and fed to
every step; the gpt draws its tokens inside the step, as gpt_torch does.

One step is opt.zero_grad(set_to_none=True), forward, loss, backward,
opt.step(): float32, CPU, torch.set_num_threads(1). The peer runs one
warm-up step (it creates the optimizer's state), then

  the measured step, under torch.profiler.profile(profile_memory=True);
  then one more step, instrumented, for the breakdown.

It prints ONE line of key=value pairs, all in bytes:

  weights     the parameters (sum of their bytes)
  gradients   the .grad tensors after backward (sum of their bytes)
  optimizer   the optimizer's state tensors (SGD without momentum: 0;
              Adam: exp_avg, exp_avg_sq and the step counters)
  saved       what autograd saves for backward during the forward: every
              tensor that reaches the pack hook of
              torch.autograd.graph.saved_tensors_hooks, counted once per
              storage (the storage's bytes: a saved view keeps all of it
              alive), storages of parameters left out (they are weights).
              It includes the fed batch x where the first layer saves it.
  transient   the largest single tensor made during the instrumented step
              (an output of any aten op, forward, backward or optimizer,
              seen by a TorchDispatchMode that keeps every output alive
              until the step ends, so no storage address is reused) whose
              storage is none of: a parameter, a gradient, an optimizer
              state tensor, a saved tensor, nor a tensor that backward only
              makes to copy into a .grad (AccumulateGrad copies a weight
              gradient that mm produced transposed into the parameter's
              layout: that is the gradient itself, counted in gradients).
              Typically an activation's gradient, an unsaved activation, or
              one of Adam's per-parameter temporaries (sqrt, div).
  bound       weights + gradients + optimizer + saved + transient
  before      what is live when the measured step starts (the step's
              zero_grad runs just before the profiler starts, so no grad):
              parameters, optimizer state, the fed batch (mlp) and the
              model's non-trainable buffers (gpt: the target map, the
              causal mask)
  peak        PyTorch's peak CPU memory in the measured step: before + the
              maximum, over time, of the cumulative sum of the profiler's
              "[memory]" events (bytes allocated positive, freed negative,
              every allocation of torch's CPU allocator during the step, in
              time order). Memory freed in the step but allocated before
              it would be missing from the profile (torch warns "Memory
              block of unknown size"); zeroing the grads before the
              profiler starts keeps that from happening.
  final       before + the cumulative sum at the end of the step (the
              grads are then live: final ~ before + gradients)

Sanity checks (a line on standard error, exit status 1 when one fails):
peak >= weights + optimizer + saved (all live at the end of the forward),
and final within 1% of before + gradients.

Exit status 0, 1 when a check fails, 2 for bad arguments, 3 when torch is
unavailable."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch  # noqa: E402
import mlp_torch  # noqa: E402


def storage_key(t):
    """(address, bytes) of the storage behind t (torch 1.13: t.storage();
    later: t.untyped_storage())."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr(), s.nbytes()


def storage_sum(tensors):
    """Bytes of the distinct storages of tensors."""
    seen = {}
    for t in tensors:
        if t is not None:
            k, n = storage_key(t)
            seen[k] = n
    return sum(seen.values())


def make_mlp(a, torch):
    model = mlp_torch.build(a, torch)
    params = list(model.parameters())
    x = torch.randn(a.batch, a.inp)
    y = torch.randint(0, a.classes, (a.batch,))
    f = torch.nn.functional

    def loss():
        return f.cross_entropy(model(x), y)
    return params, loss, [x, y]


def make_gpt(a, torch):
    # gpt_torch.GPT's settings this peer does not vary: memory does not
    # depend on them.
    a.attention = "math"
    a.init_scale = 1.0
    model = gpt_torch.GPT(a, torch.device("cpu"), torch)
    params = model.parameters()

    def loss():
        # The data as gpt_torch's step makes it: new tokens every step.
        t = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        return model.loss(t[:, 1:], model.next_map[t[:, :-1]])
    return params, loss, [model.next_map, model.causal]


def breakdown(params, opt, step, torch):
    """One instrumented step: (gradients, optimizer, saved, transient)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    outs = []  # (op name, tensor), kept alive until the step ends
    staging = set()  # storages copied into a .grad (see the docstring)

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            r = func(*args, **(kwargs or {}))
            if not isinstance(r, torch.Tensor) and \
                    func is torch.ops.aten.detach.default:
                # torch 1.13 hands a mode the scalar that a wrapped number
                # (x * 0.125) holds, and autograd's save wants a tensor
                # back: the same 0-dim double a wrapped number is.
                r = torch.tensor(r)
            for t in tree_flatten(r)[0]:
                if isinstance(t, torch.Tensor):
                    outs.append((str(func), t))
            if str(func).startswith("aten.copy_") and len(args) >= 2:
                outs.append(("copy_src", args[1]))
            return r

    saved = []

    def pack(t):
        saved.append(t)
        return t

    with Record():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            step()
    param_keys = {storage_key(p)[0] for p in params}
    grads = [p.grad for p in params if p.grad is not None]
    grad_keys = {storage_key(g)[0] for g in grads}
    state = [v for s in opt.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    state_keys = {storage_key(t)[0] for t in state}
    # A copy_ whose destination is a .grad: its source is the gradient
    # itself in another layout.
    for i, (name, t) in enumerate(outs):
        if name.startswith("aten.copy_") and storage_key(t)[0] in grad_keys:
            if i + 1 < len(outs) and outs[i + 1][0] == "copy_src":
                staging.add(storage_key(outs[i + 1][1])[0])
    saved_kept = [t for t in saved if storage_key(t)[0] not in param_keys]
    saved_keys = {storage_key(t)[0] for t in saved_kept}
    known = param_keys | grad_keys | state_keys | saved_keys | staging
    transient, what = 0, "none"
    for name, t in outs:
        if name == "copy_src":
            continue
        k, n = storage_key(t)
        if k not in known and n > transient:
            transient, what = n, "%s %s" % (name, tuple(t.shape))
    return (storage_sum(grads), storage_sum(state), storage_sum(saved_kept),
            transient, what)


def peak_of(step, torch):
    """Runs step under the profiler: (max, final) of the cumulative bytes
    allocated by torch's CPU allocator, in time order, and the number of
    memory events. torch 1.13's prof.events() folds most memory events
    into their ops' totals, so the raw kineto events are read instead."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU],
                 profile_memory=True) as prof:
        step()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and
              str(e.device_type()).endswith("CPU")]
    # A stable sort: events of the same microsecond keep their order.
    events = sorted(enumerate(events), key=lambda ie: (ie[1].start_us(),
                                                      ie[0]))
    if not events:
        return None, None, 0
    level = peak = 0
    for _, e in events:
        level += e.nbytes()
        peak = max(peak, level)
    return peak, level, len(events)


def main():
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__[len(__doc__.split("\n\n")[0]):].strip("\n"))
    sub = p.add_subparsers(dest="model", required=True)
    m = sub.add_parser("mlp", help="examples/mlp's classifier")
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--hidden", type=int, default=1024)
    m.add_argument("--batch", type=int, default=256)
    m.add_argument("--in", "--inp", dest="inp", type=int, default=1024)
    m.add_argument("--classes", type=int, default=10)
    m.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    g = sub.add_parser("gpt", help="examples/gpt's transformer")
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--hidden", type=int, default=64)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--seq", type=int, default=32)
    g.add_argument("--vocab", type=int, default=64)
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("--tie", action="store_true",
                   help="head tied to the token embedding (examples/gpt: "
                   "untied unless --tie)")
    g.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    g.add_argument("--tp", type=int, default=1,
                   help="one rank of Megatron tensor parallelism over N "
                   "ranks (N divides heads)")
    for q in (m, g):
        q.add_argument("--seed", type=int, default=1)
        q.add_argument("--verbose", action="store_true",
                       help="also say, on standard error, which tensor is "
                       "the transient and how many memory events there were")
    a = p.parse_args()
    if min(a.layers, a.hidden, a.batch) < 1 or \
            (a.model == "gpt" and (min(a.heads, a.seq, a.tp) < 1 or
                                   a.vocab < 2 or a.hidden % a.heads or
                                   a.heads % a.tp)) or \
            (a.model == "mlp" and (a.inp < 1 or a.classes < 2)):
        p.error("want positive sizes (classes, vocab >= 2; hidden a multiple "
                "of heads, heads of tp)")
    try:
        import torch
    except ImportError as e:
        print("memory_torch.py: torch is not installed for %s (%s); install "
              "it (Debian: apt-get install python3-torch) or pass the "
              "driver --python PATH" % (sys.executable, e), file=sys.stderr)
        sys.exit(3)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    params, loss_fn, held = (make_mlp if a.model == "mlp" else make_gpt)(
        a, torch)
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=0.01)
    else:
        opt = torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        opt.step()
    step()  # warm-up: the optimizer's state, the allocator's first touches

    opt.zero_grad(set_to_none=True)
    weights = storage_sum(params)
    state = [v for s in opt.state.values() for v in s.values()
             if isinstance(v, torch.Tensor)]
    before = storage_sum(params + state + held)
    rise, end, nevents = peak_of(step, torch)
    if rise is None:
        print("memory_torch.py: the profiler recorded no memory events "
              "(torch %s)" % torch.__version__, file=sys.stderr)
        sys.exit(1)
    peak, final = before + rise, before + end
    gradients, optimizer, saved, transient, what = breakdown(
        params, opt, step, torch)
    bound = weights + gradients + optimizer + saved + transient
    print("weights=%d gradients=%d optimizer=%d saved=%d transient=%d "
          "bound=%d before=%d peak=%d final=%d" %
          (weights, gradients, optimizer, saved, transient, bound, before,
           peak, final), flush=True)
    if a.verbose:
        print("memory_torch.py: torch %s; %d memory events; transient: %s" %
              (torch.__version__, nevents, what), file=sys.stderr)
    bad = []
    if peak < weights + optimizer + saved:
        bad.append("peak %d < weights + optimizer + saved %d" %
                   (peak, weights + optimizer + saved))
    if abs(final - (before + gradients)) > 0.01 * (before + gradients):
        bad.append("final %d is not before + gradients %d" %
                   (final, before + gradients))
    for b in bad:
        print("memory_torch.py: check failed: %s" % b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
