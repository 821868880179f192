"""Every op with its sequence split over D devices (`context_axis`, `ccq_jax.ops.sharding`) against the
unsplit op run as the float64 recurrence: outputs, the last shard's final states and statistics, and the gradients
of every input (initial state and statistics included), for each D given and each impl given. The generalized delta
rule's ops (`FAMILY`, tests of their own) run only when --ops names them.

    python -m tests.ops.context_parallel_check recurrent,chunk 2,3,4,8 [--on-mesh] [--ops=gla,ccq_gla] [--read=cg:2]

Run by tests/ops/test_context_parallel.py in a process of its own with 8 fake CPU devices; each D uses the first D.
Two rows of packed documents (T = 24): in row 0 a document covers tokens 5-20, so it crosses every shard boundary
between them (three shards at D = 3, six at D = 8), and the last document reuses an earlier id; in row 1 documents
start at tokens 12 and 16, shard boundaries for D = 2, 4, 8 and D = 3, 8. References run in float64 (chunks of 4
tokens, so a shard holds several), kernels in fp32 inside a shard_map with `check_vma=False` (JAX's Pallas
interpreter binds dynamic slices without varying-axis casts). With --on-mesh each op is also called plainly under
`jax.set_mesh` of a (data 2, context 4) mesh with `axes` naming them, where it splits the sequence itself.
Prints one row per case, then "worst <relative RMS>". --read=KIND:COUNT gives the CCQ ops that read policy
(`ccq_jax.ops.ReadPolicy`; lam then in [0, 4] for cg).
"""

import functools
import inspect
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import ccq_jax.ops as ops
from tests.builders import rel_rms

B, T, H, K, V = 2, 24, 2, 4, 3
SEGMENTS = np.array([[0] * 5 + [1] * 16 + [0] * 3, [3] * 12 + [4] * 4 + [5] * 8], np.int32)
REFERENCES = ("recurrent", "chunk")
OPS = {"gla": (ops.gla, ("q", "k", "v", "g"), ("initial_state",)),
       "gated_delta_rule": (ops.gated_delta_rule, ("q", "k", "v", "gh", "beta"), ("initial_state",)),
       "ccq_query": (ops.ccq_query, ("q", "k", "lam"), ("initial_stats",)),
       "ccq_gla": (ops.ccq_gla, ("q", "k", "v", "g", "lam"), ("initial_state", "initial_stats")),
       "ccq_gated_delta_rule": (ops.ccq_gated_delta_rule, ("q", "k", "v", "gh", "beta", "lam"),
                                ("initial_state", "initial_stats"))}
FAMILY = {"generalized_delta_rule": (ops.generalized_delta_rule, ("q", "k", "v", "g", "a"), ("initial_state",)),
          "ccq_generalized_delta_rule": (ops.ccq_generalized_delta_rule, ("q", "k", "v", "g", "a", "lam"),
                                         ("initial_state", "initial_stats")),
          "qed": (ops.qed, ("q", "k", "v", "g", "b", "w", "lam_qed"), ("initial_state",))}  # only with --ops=


def inputs(dtype):
    """Random inputs: strong decay in row 0 (exp(-7) a token on average), half the gates zero in row 1."""
    rng = np.random.default_rng(0)
    x = lambda *shape: rng.standard_normal(shape)
    k = x(B, T, H, K)
    g = np.stack([-np.logaddexp(0, -x(T, H, K)) / 0.1, np.where(rng.random((T, H, K)) < 0.5, 0, -np.logaddexp(
        0, -x(T, H, K) - 3))])
    keys = x(B, H, 5, K)
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)
    arrays = dict(q=x(B, T, H, K), k=k / np.linalg.norm(k, axis=-1, keepdims=True), v=x(B, T, H, V), g=g,
                  gh=g[..., 0], beta=rng.uniform(0, 1, (B, T, H)), lam=rng.uniform(0, 1, (B, T, H)),
                  initial_state=x(B, H, K, V))
    arrays.update(a=rng.uniform(0, 1, (B, T, H, K)) * arrays["k"] + 0.2 * x(B, T, H, K),
                  b=rng.uniform(0, 1, (B, T, H, K)), w=rng.uniform(0, 1, (B, T, H, V)),
                  lam_qed=rng.uniform(0, 0.25, (B, T, H)))
    cast = lambda a: jnp.asarray(a, dtype)
    stats = ops.CCQStats(cast(np.einsum("bhnk,bhnl->bhkl", keys, keys)), cast(keys.sum(2)), cast(np.full((B, H), 5)))
    return {**{name: cast(a) for name, a in arrays.items()}, "initial_stats": stats}


def outputs_of(op, states, impl, **call):
    """`op` as a function of (positional inputs, state inputs, segment ids) -> (o, final states)."""
    flags = {"output_final_state": "initial_state" in states, "output_final_stats": "initial_stats" in states}
    flags = {k: v for k, v in flags.items() if k in inspect.signature(op).parameters}
    chunk = {"chunk_size": 4} if impl == "chunk" else {}
    return lambda positional, state_inputs, segment_ids: op(*positional, **state_inputs, **flags,
                                                            segment_ids=segment_ids, impl=impl, **chunk, **call)


def score(tree):
    """A scalar that touches every element of every array in `tree`."""
    return sum(jnp.sum(jnp.sin(leaf)) for leaf in jax.tree.leaves(tree))


def unsplit_run(op, names, states, impl, x, **call):
    outputs = outputs_of(op, states, impl, **call)
    return _value_and_grad(lambda *a: (lambda out: (score(out), out))(outputs(*a)), names, states, x)


def split_run(op, names, states, impl, d, x):
    """Outputs and gradients with the sequence split over the first d devices (context_axis); each device scores
    its outputs, the last its final states too."""
    mesh = jax.make_mesh((d,), ("sequence",), axis_types=(jax.sharding.AxisType.Auto,), devices=jax.devices()[:d])
    outputs = outputs_of(op, states, impl, context_axis="sequence")

    def shard(positional, state_inputs, segment_ids):
        o, finals = outputs(positional, state_inputs, segment_ids)
        last = jax.lax.axis_index("sequence") == d - 1
        value = score(o) + jnp.where(last, score(finals), 0.0)
        return value[None], (o, jax.tree.map(lambda a: a[None], finals))

    sharded = jax.shard_map(shard, mesh=mesh, in_specs=(P(None, "sequence"), P(), P(None, "sequence")),
                            out_specs=(P("sequence"), (P(None, "sequence"), P("sequence"))),
                            check_vma=impl in REFERENCES)

    def loss(*a):
        values, (o, finals) = sharded(*a)
        return jnp.sum(values), (o, jax.tree.map(lambda f: f[-1], finals))

    return _value_and_grad(loss, names, states, x)


def on_mesh_run(op, names, states, impl, x):
    """The op called plainly under a set (data 2, context 4) mesh, told its axes: it splits the sequence itself."""
    mesh = jax.make_mesh((2, 4), ("data", "context"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        placed = {**x, **{n: jax.device_put(x[n], NamedSharding(mesh, P("data", "context"))) for n in names}}
        return unsplit_run(op, names, states, impl, placed, axes=ops.OpsAxes(batch=("data",), context="context"))


def _value_and_grad(loss, names, states, x):
    """((o, final states), gradients of every positional and state input) of loss(positional, states, ids) ->
    (scalar, outputs)."""
    positional, state_inputs = [x[n] for n in names], {n: x[n] for n in states}
    run = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    (_, outputs), grads = run(positional, state_inputs, jnp.asarray(SEGMENTS))
    return outputs, grads


def read_policy(text):
    """`ReadPolicy` of "KIND:COUNT" (COUNT: the Neumann terms or CG iterations)."""
    kind, count = text.split(":")
    return ops.ReadPolicy(kind, terms=int(count), iterations=int(count))


def main(impls, devices, on_mesh, names_of_ops, read=None):
    worst = 0.0
    for name in names_of_ops:
        op, names, states = {**OPS, **FAMILY}[name]
        if read is not None:
            op = functools.partial(op, read=read)
        scale_lam = lambda x: {**x, "lam": x["lam"] * 4} if read is not None and read.kind == "cg" else x
        with jax.enable_x64(True):
            x64 = scale_lam(inputs(jnp.float64))
            want = jax.tree.map(np.asarray, unsplit_run(op, names, states, "recurrent", x64))
        for impl in impls:
            with jax.enable_x64(impl in REFERENCES):
                x = scale_lam(inputs(jnp.float64 if impl in REFERENCES else jnp.float32))
                runs = [(f"D={d}", split_run(op, names, states, impl, d, x)) for d in devices]
                if on_mesh:
                    runs.append(("on a (data 2, context 4) mesh", on_mesh_run(op, names, states, impl, x)))
                for label, got in runs:
                    errors = [rel_rms(g, w) for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want))]
                    assert len(errors) == len(jax.tree.leaves(want)) and all(np.isfinite(errors)), (name, errors)
                    worst = max(worst, *errors)
                    print(name, impl, label, f"{max(errors):.2e}", flush=True)
    print("worst", worst)


if __name__ == "__main__":
    chosen = [a.split("=", 1)[1].split(",") for a in sys.argv[3:] if a.startswith("--ops=")]
    reads = [read_policy(a.split("=", 1)[1]) for a in sys.argv[3:] if a.startswith("--read=")]
    main(sys.argv[1].split(","), [int(d) for d in sys.argv[2].split(",")], "--on-mesh" in sys.argv[3:],
         chosen[0] if chosen else list(OPS), reads[0] if reads else None)
