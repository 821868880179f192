"""Shared pieces of the model and inference tests: tiny models with random CCQ gates, token ids, a jitted forward."""

import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.models import CausalLM, get_config

# every family with and without CCQ; GLA with its short convs and grouped keys, chunks shorter than the prompts.
# Weights ~ N(0, 0.1) rather than fla's 0.02: then every mixer's output is as large as the residual stream
# (at 0.02, GLA behind short convs adds ~1e-6 to it, and any decoding bug in it would go unseen).
INIT = dict(initializer_range=0.1)
CASES = {
    "transformer": ("transformer-tiny", INIT),
    "gla": ("gla-tiny", dict(INIT, chunk_size=4)),
    "gdn": ("gdn-tiny", dict(INIT, chunk_size=4)),
    "ccq-gla": ("ccq-gla-tiny", dict(INIT, chunk_size=4, use_short_conv=True, num_kv_heads=2)),
    "ccq-gdn": ("ccq-gdn-tiny", dict(INIT, chunk_size=4)),
}


def build(name, overrides=None, seed=0):
    """A tiny model; CCQ gate weights (zero at init) get random values so the CCQ read matters."""
    model = CausalLM(get_config(name, **(overrides or {})), rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed + 100)
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Param) and "ccq" in path:
            var.value = jnp.asarray(rng.standard_normal(var.value.shape), var.value.dtype)
    return model


def token_ids(shape, seed=0, vocab=256):
    return jnp.asarray(np.random.default_rng(seed).integers(0, vocab, shape), jnp.int32)


@nnx.jit
def forward(model, input_ids, segment_ids=None):
    return model(input_ids, segment_ids)
