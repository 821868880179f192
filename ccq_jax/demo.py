"""`ccq-demo`: run every op through every impl on random data and print agreement and speed.

For each op, the "recurrent" form is the ground truth; the table shows how far each other
form's outputs, final states and gradients land from it (relative RMS) and how long a
jit-compiled forward and forward+backward take on this machine.

With the defaults it takes about 4 minutes on a 2-core CPU (most of it compiling; a rerun loads
the compiled programs from the cache, see below). Each op's rows are printed as soon as they
are measured, also into a pipe or a file, and a progress line on stderr counts the op/impl
pairs (a bar on a terminal, a line every 30 s elsewhere). `--seqlen 128 --repeats 1` is quicker.
Compiled programs are cached in ~/.cache/ccq-jax/xla; CCQ_JAX_COMPILATION_CACHE=off turns that off.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import ccq_jax.ops as ops
from ccq_jax.cli import use_compilation_cache
from ccq_jax.progress import progress


def _inputs(key, b, t, h, dk, dv):
    ks = jax.random.split(key, 8)
    normal = lambda i, *s: jax.random.normal(ks[i], s, jnp.float32)
    k = normal(1, b, t, h, dk)
    return dict(
        q=normal(0, b, t, h, dk), k=k, k_unit=k / jnp.linalg.norm(k, axis=-1, keepdims=True), v=normal(2, b, t, h, dv),
        g=jax.nn.log_sigmoid(normal(3, b, t, h, dk) + 3), g_head=jax.nn.log_sigmoid(normal(4, b, t, h) + 3),
        beta=jax.random.uniform(ks[5], (b, t, h)), lam=jax.random.uniform(ks[6], (b, t, h)),
        segment_ids=jnp.repeat(jnp.arange(4), -(-t // 4))[None, :t].repeat(b, 0),
    )


OPS = {
    "gla": (ops.gla, ("q", "k", "v", "g")),
    "gated_delta_rule": (ops.gated_delta_rule, ("q", "k_unit", "v", "g_head", "beta")),
    "ccq_query": (ops.ccq_query, ("q", "k", "lam")),
    "ccq_gla": (ops.ccq_gla, ("q", "k", "v", "g", "lam")),
    "ccq_gated_delta_rule": (ops.ccq_gated_delta_rule, ("q", "k_unit", "v", "g_head", "beta", "lam")),
}


def _final_flags(name):
    return {"output_final_stats": True} if name == "ccq_query" else (
        {"output_final_state": True, "output_final_stats": True} if name.startswith("ccq") else {"output_final_state": True})


def _timed(fn, *args, repeats):
    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


COMPARED = (*ops.REFERENCES, "pallas")  # the impls each op runs in


def run(b, t, h, dk, dv, repeats, seed, on_pair=lambda: None):
    """Yields (op, impl, outputs err, grads err, fwd ms, fwd+bwd ms) for each impl of each op, an op's rows once
    all its impls are measured; `on_pair()` is called after each op/impl pair."""
    x = _inputs(jax.random.key(seed), b, t, h, dk, dv)
    for name, (op, names) in OPS.items():
        args = [x[n] for n in names]
        results = {}
        for impl in COMPARED:
            fwd = jax.jit(lambda *a, impl=impl: op(*a, segment_ids=x["segment_ids"], impl=impl, **_final_flags(name)))
            loss = lambda *a, fwd=fwd: sum(jnp.sum(jnp.sin(l)) for l in jax.tree.leaves(fwd(*a)))
            grad = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
            results[impl] = (fwd(*args), grad(*args), _timed(fwd, *args, repeats=repeats), _timed(grad, *args, repeats=repeats))
            on_pair()
        truth_out, truth_grad = results["recurrent"][:2]
        for impl, (out, grads, t_fwd, t_bwd) in results.items():
            out_err = max(_rel(a, b) for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(truth_out)))
            grad_err = max(_rel(a, b) for a, b in zip(grads, truth_grad))
            yield name, impl, out_err, grad_err, t_fwd, t_bwd


def main(argv=None):
    p = argparse.ArgumentParser(prog="ccq-demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--key-dim", type=int, default=32)
    p.add_argument("--value-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    use_compilation_cache()
    print(f"ccq-jax ops on {jax.devices()[0].platform}: B={a.batch} T={a.seqlen} H={a.heads} K={a.key_dim} "
          f"V={a.value_dim}, fp32, 4 packed documents per row; errors are relative RMS vs impl='recurrent'")
    header = f"{'op':22s} {'impl':10s} {'outputs err':>12s} {'grads err':>10s} {'fwd ms':>9s} {'fwd+bwd ms':>11s}"
    print(header)
    print("-" * len(header), flush=True)
    with progress(total=len(OPS) * len(COMPARED), desc="ccq-demo", unit="pair") as bar:
        for name, impl, out_err, grad_err, t_fwd, t_bwd in run(a.batch, a.seqlen, a.heads, a.key_dim, a.value_dim,
                                                              a.repeats, a.seed, on_pair=lambda: bar.update(1)):
            bar.clear()
            print(f"{name:22s} {impl:10s} {out_err:12.1e} {grad_err:10.1e} {t_fwd:9.2f} {t_bwd:11.2f}", flush=True)


if __name__ == "__main__":
    main()
