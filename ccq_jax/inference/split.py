"""A model split once for inference: `SplitModel`, accepted wherever `ccq_jax.inference` takes a model.

Each inference call needs the model as (graphdef, state) to enter its compiled function, and `nnx.split`
walks every module and variable to make them: 18 ms per call for gla-1.3b and 22 ms for ccq-gla-1.3b on a
2-core CPU (the `split` rows of `benchmarks/inference.py`), while that model's whole 2048-token prefill is
5.3 TFLOP, about 7 ms at the H200's peak bf16 rate. A server or an evaluation loop that calls prefill / decode
many times splits once:

    served = split_model(model)
    logits, cache = prefill(served, ids, init_cache(served, batch, max_length))

The state holds the model's arrays as they were when split: split again after changing the model.

The compiled functions take the graphdef as a static argument, which jit hashes on every call, and flax hashes a
GraphDef by walking the whole model: 2.9 ms per call for gla-1.3b on the 2-core CPU (`graph_hash_ms` of
`benchmarks/inference.py`), more than a decode step of that model takes on an H200 (0.64 ms of bytes). A
SplitModel therefore carries its `GraphKey`, hashed once.
"""

from typing import NamedTuple

import jax
from flax import nnx


@jax.tree_util.register_static
class GraphKey:
    """A GraphDef as a static argument of a compiled function: hashed once; equal to another key of the same (or an
    equal) GraphDef."""

    __slots__ = ("graphdef", "digest")

    def __init__(self, graphdef: nnx.GraphDef):
        self.graphdef, self.digest = graphdef, hash(graphdef)

    def __hash__(self) -> int:
        return self.digest

    def __eq__(self, other) -> bool:
        return isinstance(other, GraphKey) and (other.graphdef is self.graphdef or (
            other.digest == self.digest and other.graphdef == self.graphdef))


class SplitModel(NamedTuple):
    """graphdef, state: `nnx.split(model)`; key: the graphdef's `GraphKey` (`split_model` sets it; without one,
    each call hashes the graphdef again)."""

    graphdef: nnx.GraphDef
    state: nnx.State
    key: GraphKey | None = None


def split_model(model) -> SplitModel:
    """`model` (an nnx module such as `CausalLM`) as a SplitModel; a SplitModel is returned as it is."""
    if isinstance(model, SplitModel):
        return model
    if not isinstance(model, nnx.Module):
        raise ValueError(f"model: expected an nnx.Module (a CausalLM) or a SplitModel, got {type(model).__name__}")
    graphdef, state = nnx.split(model)
    return SplitModel(graphdef, state, GraphKey(graphdef))


def graph_key(served: SplitModel) -> GraphKey:
    """The static argument the compiled inference functions take for `served`'s graphdef."""
    return served.key if served.key is not None and served.key.graphdef is served.graphdef else GraphKey(
        served.graphdef)
