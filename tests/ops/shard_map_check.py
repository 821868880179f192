"""Every op of the given impls inside `jax.shard_map` over a mesh of all devices, batch over "data" and heads over
"tensor" (2 x 2 on 4 devices, else batch only), against the same op unsharded: outputs and the gradients of every
input, and the same op called with the mesh set (`jax.set_mesh`) and `axes` naming its axes (kernels split
themselves); also with an initial state every batch shard shares (its gradient is the sum over shards). Run in a
process of its own by tests/ops/test_shard_map.py (4 CPU devices) and tests/pallas/test_gpu.py (pallas).

The shard_map keeps its default checks, except around interpreted kernels (impl "pallas" on a CPU): JAX's Pallas
interpreter binds the kernels' dynamic slices without varying-axis casts, so there `check_vma=False`. The "scan"
form is not run: XLA:CPU (jax 0.11.2) crashes (SIGSEGV) compiling its gradient inside a shard_map whose inputs it
does not all use, as here.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

import ccq_jax.ops as ops
from tests.builders import rel_rms as _rel

AXES = ops.OpsAxes(batch=("data",), heads=("tensor",))  # what the ops split on the set mesh


def main(impls):
    n = jax.device_count()
    shape = (n // 2, 2) if n >= 4 else (n, 1)
    mesh = jax.make_mesh(shape, ("data", "tensor"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    token, rows = P("data", None, "tensor"), P("data")
    interpreted = jax.default_backend() == "cpu"
    b, t, h, dk, dv = 4, 40, 2, 16, 32
    r = np.random.default_rng(0)
    x = lambda *s: jnp.asarray(r.standard_normal(s), jnp.float32)
    q, k, v = x(b, t, h, dk), x(b, t, h, dk), x(b, t, h, dv)
    unit = lambda a: a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    g = jax.nn.log_sigmoid(x(b, t, h, dk) + 3.0)
    gh, beta, lam = g[..., 0], jax.nn.sigmoid(x(b, t, h)), jax.nn.sigmoid(x(b, t, h) - 2.0)
    segments = jnp.asarray(np.repeat([[0] * 25 + [1] * 15], b, 0), jnp.int32)
    h0 = x(1, h, dk, dv)[0] * 0.1  # one state for every row, shared by the batch shards
    ops_by_name = {  # (inputs, segment ids, impl, axes) -> o
        "gla": lambda q, k, v, g, gh, beta, lam, s, impl, axes=None: ops.gla(
            q, k, v, g, segment_ids=s, impl=impl, axes=axes)[0],
        "gated_delta_rule": lambda q, k, v, g, gh, beta, lam, s, impl, axes=None: ops.gated_delta_rule(
            q, unit(k), v, gh, beta, segment_ids=s, impl=impl, axes=axes)[0],
        "ccq_query": lambda q, k, v, g, gh, beta, lam, s, impl, axes=None: ops.ccq_query(
            q, k, lam, segment_ids=s, impl=impl, axes=axes)[0],
        "ccq_gla": lambda q, k, v, g, gh, beta, lam, s, impl, axes=None: ops.ccq_gla(
            q, k, v, g, lam, segment_ids=s, impl=impl, axes=axes)[0],
        "ccq_gated_delta_rule": lambda q, k, v, g, gh, beta, lam, s, impl, axes=None: ops.ccq_gated_delta_rule(
            q, unit(k), v, gh, beta, lam, segment_ids=s, impl=impl, axes=axes)[0],
    }
    args = (q, k, v, g, gh, beta, lam, segments)
    worst = 0.0
    for impl in impls:
        check_vma = not (impl == "pallas" and interpreted)
        for name, op in ops_by_name.items():
            f = lambda *a: op(*a, impl)
            sharded = jax.shard_map(f, mesh=mesh, in_specs=(token,) * 7 + (rows,), out_specs=token,
                                    check_vma=check_vma)
            loss = lambda fn: (lambda *a: jnp.sum(fn(*a) ** 2))
            got = jax.jit(jax.value_and_grad(loss(sharded), argnums=range(7)))(*args)
            want = jax.jit(jax.value_and_grad(loss(f), argnums=range(7)))(*args)
            with jax.set_mesh(mesh):  # no shard_map of ours: kernels split by the op itself (ops.sharding.local)
                placed = [jax.device_put(a, s) for a, s in zip(args, (token,) * 7 + (rows,))]
                split = lambda *a: op(*a, impl, AXES)
                on_mesh = jax.jit(jax.value_and_grad(loss(split), argnums=range(7)))(*placed)
            for where, result in (("inside shard_map", got), ("on a set mesh", on_mesh)):
                errors = [_rel(a, w) for a, w in zip(jax.tree.leaves(result), jax.tree.leaves(want))]
                worst = max(worst, *errors)
                print(impl, name, where, f"{max(errors):.2e}", flush=True)
        # a replicated initial state: each shard reads it, its gradient sums the shards' shares
        f = lambda q, k, v, g, s0: ops.gla(q, k, v, g, initial_state=jnp.broadcast_to(s0, (q.shape[0], *s0.shape)),
                                           impl=impl)[0]
        sharded = jax.shard_map(f, mesh=mesh, in_specs=(token,) * 4 + (P("tensor"),), out_specs=token,
                                check_vma=check_vma)
        loss = lambda fn: (lambda *a: jnp.sum(fn(*a) ** 2))
        got = jax.jit(jax.grad(loss(sharded), argnums=4))(q, k, v, g, h0)
        want = jax.jit(jax.grad(loss(f), argnums=4))(q, k, v, g, h0)
        assert float(jnp.max(jnp.abs(want))) > 0
        worst = max(worst, _rel(got, want))
        print(impl, "gla with a shared initial state", f"{_rel(got, want):.2e}", flush=True)
    print("worst", worst)


if __name__ == "__main__":
    main(sys.argv[1].split(","))
