"""remat_policy "dots" (`ccq_jax.layers.remat`): each linear-attention block's backward pass keeps the matmuls'
outputs and what the kernels keep (`ccq_jax.ops.KEPT`) and recomputes the elementwise work between them, without
running a forward kernel again: the compiled gradient (CPU, kernels interpreted) holds as many instances of each
Pallas kernel as under "elementwise". The instrument's control: a kernel output the policy does not keep is
recomputed, and the count shows it."""

import collections
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax.layers.remat import SAVE_DOTS_AND_KERNELS, kept_output
from tests.builders import build, inner_jaxprs, token_ids

PALLAS = {"kernel.impl": "pallas", "kernel.interpret": True, "kernel.chunk_size": 16}


def _kernel_names(jaxpr) -> set:
    """The names of the Pallas kernels a jaxpr calls, inside nested jaxprs too."""
    names = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            names.add(str(eqn.params["name"]))
        for inner in inner_jaxprs(eqn):
            names |= _kernel_names(inner)
    return names


def _kernel_instances(fn, *args) -> collections.Counter:
    """How many times the compiled `fn` runs each Pallas kernel: an interpreted kernel is one loop whose op name
    ends in its name; XLA's dead-code elimination has already removed what nothing reads."""
    names = _kernel_names(jax.make_jaxpr(fn)(*args).jaxpr)
    assert names, "no Pallas kernel traced"
    text = jax.jit(fn).lower(*args).compile().as_text()
    loops = re.findall(r" while\(.*op_name=\"[^\"]*/(\w+)/while\"", text)
    return collections.Counter(name for name in loops if name in names)


def _gla_grad(policy, keep_output):
    def f(q, k, v, g):
        o, _ = ops.gla(q, k, v, g, impl="pallas", interpret=True, chunk_size=16)
        return jnp.sin(kept_output(o) if keep_output else o)  # the backward pass needs o

    f = f if policy is None else jax.checkpoint(f, policy=policy)
    return jax.grad(lambda *a: jnp.sum(f(*a)), argnums=(0, 1, 2, 3))


def test_the_count_sees_a_kernel_run_again():
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((1, 32, 2, 16)), jnp.float32) for _ in range(3))
    g = -jnp.asarray(rng.uniform(0.01, 1, (1, 32, 2, 16)), jnp.float32)
    plain = _kernel_instances(_gla_grad(None, False), q, k, v, g)
    assert _kernel_instances(_gla_grad(SAVE_DOTS_AND_KERNELS, True), q, k, v, g) == plain
    rerun = _kernel_instances(_gla_grad(SAVE_DOTS_AND_KERNELS, False), q, k, v, g)
    assert rerun != plain and all(rerun[name] >= n for name, n in plain.items()), (plain, rerun)


# CCQ-GLA with short convolutions (the GLA kernels, the fused CCQ read), CCQ-GDN (the delta rule's kernels), CCQ-KDA
# (the state pass, the read on its own) and Mamba2
@pytest.mark.parametrize("name", ["ccq-gla-tiny", "ccq-gdn-tiny", "ccq-kda-tiny", "mamba2-tiny"])
def test_dots_runs_no_forward_kernel_again(name):
    ids = token_ids((2, 32))
    counts = []
    for policy in ("elementwise", "dots"):
        overrides = dict(PALLAS, initializer_range=0.1, num_hidden_layers=1, remat_policy=policy,
                         **({"use_short_conv": True} if name == "ccq-gla-tiny" else {}))
        graphdef, params = nnx.split(build(name, overrides))
        grad = jax.grad(lambda p, g=graphdef: jnp.mean(jnp.sin(nnx.merge(g, p)(ids))))
        counts.append(_kernel_instances(grad, params))
    assert counts[1] == counts[0], counts
