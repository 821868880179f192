"""A model split once for inference: `SplitModel`, accepted wherever `ccq_jax.inference` takes a model.

Each inference call needs the model as (graphdef, state) to enter its compiled function, and `nnx.split`
walks every module and variable to make them: 18 ms per call for gla-1.3b and 22 ms for ccq-gla-1.3b on a
2-core CPU (the `split` rows of `benchmarks/inference.py`), while that model's whole 2048-token prefill is
5.3 TFLOP, about 7 ms at the H200's peak bf16 rate. A server or an evaluation loop that calls prefill / decode
many times splits once:

    served = split_model(model)
    logits, cache = prefill(served, ids, init_cache(served, batch, max_length))

The state holds the model's arrays as they were when split: split again after changing the model.
"""

from typing import NamedTuple

from flax import nnx


class SplitModel(NamedTuple):
    graphdef: nnx.GraphDef
    state: nnx.State


def split_model(model) -> SplitModel:
    """`model` (an nnx module such as `CausalLM`) as a SplitModel; a SplitModel is returned as it is."""
    if isinstance(model, SplitModel):
        return model
    if not isinstance(model, nnx.Module):
        raise ValueError(f"model: expected an nnx.Module (a CausalLM) or a SplitModel, got {type(model).__name__}")
    return SplitModel(*nnx.split(model))
