"""`init_split`: the model's initial variables piece by piece, equal to one program's, compiled once per kind."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from benchmarks.tools.compilation import CompileCounter
from ccq_jax.models import CausalLM, get_config, init_split, layer_mixers


def _whole(cfg, seed):
    """split(CausalLM) with every variable made by one jitted program (how models were built before pieces)."""
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: CausalLM(cfg, rngs=nnx.Rngs(seed))))
    params, others = jax.jit(lambda: nnx.split(CausalLM(cfg, rngs=nnx.Rngs(seed)), nnx.Param, ...)[1:])()
    return graphdef, params, others


def _compiled_programs(fn):
    """fn's result and the names of the XLA programs compiled while it ran."""
    with CompileCounter() as compiles:
        result = fn()
    return result, compiles.names


@pytest.mark.parametrize("name, overrides", [
    ("ccq-gdn-tiny", {}), ("gla-hybrid-tiny", {}), ("transformer-tiny", {}), ("mamba2-hybrid-tiny", {}),
    ("ccq-kda-tiny", {"tie_word_embeddings": True}),
])
def test_equals_one_program(name, overrides):
    cfg = get_config(name, **overrides)
    graphdef, params, others = init_split(cfg, 7)
    want_graphdef, want_params, want_others = _whole(cfg, 7)
    assert graphdef == want_graphdef
    assert jax.tree.structure((params, others)) == jax.tree.structure((want_params, want_others))
    for got, want in zip(jax.tree.leaves((params, others)), jax.tree.leaves((want_params, want_others))):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # and the seed matters
    other = jax.tree.leaves(init_split(cfg, 8)[1])
    assert any(not np.array_equal(a, b) for a, b in zip(other, jax.tree.leaves(params)))


@pytest.mark.parametrize("layers", [4, 12])
def test_one_program_per_kind_of_piece(layers):
    """A hybrid of GLA and attention layers: embeddings, one GLA layer, one attention layer, final norm, head (5
    programs) at any depth; one program of the whole model would grow with the depth."""
    attn = {"layers": list(range(1, layers, 2)), "num_heads": 4, "num_kv_heads": 2}
    cfg = get_config("gla-hybrid-tiny", num_hidden_layers=layers, attn=attn)
    assert len(set(layer_mixers(cfg))) == 2
    (_, params, _), names = _compiled_programs(lambda: init_split(cfg, 0))
    assert len(params["layers"]) == layers
    assert [n for n in names if "init_piece" in n] == ["jit(init_piece)"] * 5, names


def test_shard_places_each_piece():
    """`shard` gives each piece's shardings; every variable lands in them (a mesh of the CPU devices, 1 or more)."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    shard = lambda state: jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), state)
    cfg = get_config("gdn-tiny", num_hidden_layers=3)
    (_, params, others), names = _compiled_programs(lambda: init_split(cfg, 0, shard=shard))
    for x in jax.tree.leaves((params, others)):
        assert x.sharding == NamedSharding(mesh, PartitionSpec())
    # the random stream arrives at every layer in the same sharding: no layer's program compiles twice
    assert [n for n in names if "init_piece" in n] == ["jit(init_piece)"] * 4, names
