"""Our parameters <-> fla's state_dict: one name and one layout rule per parameter.

fla names are our module paths with a `model.` prefix (`lm_head` has none), the layouts:

    nnx.Linear kernel [in, out]        <->  <path>.weight [out, in]      (transposed)
    ShortConvolution kernel [W, C]     <->  <path>.weight [C, 1, W]      (torch's depthwise Conv1d)
    nnx.Embed embedding [E, D]         <->  <path>.weight [E, D]
    everything else (norm weights, Linear biases, A_log, dt_bias, ccq.weight [H, K], ccq.bias [H])
                                       <->  <path> unchanged

so `layers.3.attn.q_proj.kernel` is `model.layers.3.attn.q_proj.weight`, transposed, and the CCQ
gate of layer 3 is `model.layers.3.attn.ccq.weight` / `.bias`. Mamba2 models are fla's `backbone.` instead of
`model.`, their blocks' `attn_norm` / `attn` fla's `norm` / `mixer` and the final `norm` fla's `norm_f`
(`layers.3.attn.in_proj.kernel` is `backbone.layers.3.mixer.in_proj.weight`; conv1d's bias, D, `norm.weight`:
unchanged). Conversions are exact (transposes and reshapes only; a dtype cast only when the stored dtype differs from the model's).
`native_rules` name every parameter by its own dotted path, unchanged: ccq-jax's own format
(`CausalLM.save_pretrained`). fla's config fields are mapped in `ccq_jax.convert.config`. `load_layer` fills one
mixer layer from an fla layer's own state_dict (layer-level parity, e.g. with fla's GDN-2 layer, which has no model).
"""

from collections.abc import Mapping
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from flax import nnx

from ccq_jax.layers.conv import ShortConvolution
from ccq_jax.models.config import Mamba2Config
from ccq_jax.progress import progress as progress_bar


class Layout(NamedTuple):
    to_stored: object  # ours -> stored (an array function)
    from_stored: object  # stored -> ours
    stored_shape: object  # our shape -> the stored one


def _same(x):
    return x


LAYOUTS = {
    "same": Layout(_same, _same, tuple),
    "linear": Layout(lambda k: np.ascontiguousarray(k.T), lambda w: np.ascontiguousarray(w.T),
                     lambda s: tuple(s[::-1])),
    "conv": Layout(lambda k: np.ascontiguousarray(k.T[:, None, :]), lambda w: np.ascontiguousarray(w[:, 0, :].T),
                   lambda s: (s[1], 1, s[0])),
}


# Mamba2's fla names: `backbone.` for `model.`, and its block's and final norm's names ({ours: fla's})
MAMBA2_BLOCK = {"attn_norm": "norm", "attn": "mixer"}
MAMBA2_TOP = {"norm": "norm_f"}


def _fla_module(config, path) -> str:
    """fla's dotted name of our module `path` (a tuple, the parameter's leaf dropped), its prefix included."""
    parts = [str(p) for p in path]
    if parts[0] == "lm_head":
        return "lm_head"
    if not isinstance(config, Mamba2Config):
        return ".".join(["model", *parts])
    parts[0] = MAMBA2_TOP.get(parts[0], parts[0])
    if parts[0] == "layers":
        parts[2] = MAMBA2_BLOCK.get(parts[2], parts[2])
    return ".".join(["backbone", *parts])


def fla_rules(model: nnx.Module) -> dict[tuple, tuple[str, Layout]]:
    """our parameter path -> (fla name, layout), in the model's order."""
    return _layout_rules(model, lambda path: _fla_module(model.config, path))


def _layout_rules(model, module_name) -> dict[tuple, tuple[str, Layout]]:
    """our parameter path -> (name, fla's layout), `module_name(path)` naming the module of each parameter."""
    modules = {path: node for path, node in nnx.iter_graph(model) if isinstance(node, nnx.Module)}
    rules = {}
    for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        parent, leaf = modules[path[:-1]], path[-1]
        module = module_name(path[:-1])
        if isinstance(parent, nnx.Linear) and leaf == "kernel":
            rules[path] = (f"{module}.weight", LAYOUTS["linear"])
        elif isinstance(parent, ShortConvolution) and leaf == "kernel":
            rules[path] = (f"{module}.weight", LAYOUTS["conv"])
        elif isinstance(parent, nnx.Embed) and leaf == "embedding":
            rules[path] = (f"{module}.weight", LAYOUTS["same"])
        else:
            rules[path] = (f"{module}.{leaf}", LAYOUTS["same"])
    return rules


def native_rules(model: nnx.Module) -> dict[tuple, tuple[str, Layout]]:
    """our parameter path -> (its dotted path, unchanged layout): ccq-jax's own file format."""
    return {path: (".".join(map(str, path)), LAYOUTS["same"])
            for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def to_state_dict(model: nnx.Module, *, rules=fla_rules, progress: bool = False) -> dict[str, np.ndarray]:
    """The parameters of `model` as NumPy arrays (their dtype) under the names and layouts of `rules`
    (default: fla's state_dict)."""
    state = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    return {name: layout.to_stored(np.asarray(state[path][...]))
            for path, (name, layout) in progress_bar(rules(model).items(), desc="converting", disable=not progress)}


def _names(names, limit=8):
    names = sorted(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def from_state_dict(model: nnx.Module, state_dict: Mapping[str, np.ndarray], *, rules=fla_rules,
                    progress: bool = False) -> nnx.Module:
    """`model` (a `CausalLM` of `jax.ShapeDtypeStruct`s, see `ccq_jax.models.abstract_model`) filled, in place, with
    the tensors of `state_dict`, named and laid out by `rules` (default: fla's).

    ValueError on missing, unexpected or mis-shaped tensors. With tied embeddings a stored
    `lm_head.weight` (fla's name) must equal the embeddings and is dropped.
    """
    config = model.config
    rules = rules(model)
    state_dict = dict(state_dict)
    if config.tie_word_embeddings and "lm_head.weight" in state_dict:
        embeddings = rules[("embeddings", "embedding")][0]
        if not np.array_equal(state_dict.pop("lm_head.weight"), state_dict.get(embeddings)):
            raise ValueError(f"state_dict: tie_word_embeddings is set but lm_head.weight differs from {embeddings}")
    names = {name for name, _ in rules.values()}
    missing, unexpected = names - set(state_dict), set(state_dict) - names
    if missing or unexpected:
        raise ValueError(f"state_dict: does not match the {config.family} model of this config: "
                         f"missing [{_names(missing)}]; unexpected [{_names(unexpected)}]")
    expected = {path: var.get_value() for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    wrong = [f"{name} {state_dict[name].shape} (expected {layout.stored_shape(expected[path].shape)})"
             for path, (name, layout) in rules.items()
             if state_dict[name].shape != layout.stored_shape(expected[path].shape)]
    if wrong:
        raise ValueError(f"state_dict: shapes do not match the config: {_names(wrong)}")
    values = {}
    for path, (name, layout) in progress_bar(rules.items(), desc="converting", disable=not progress):
        stored = np.asarray(state_dict[name])
        values[path] = jnp.asarray(layout.from_stored(stored).astype(expected[path].dtype, copy=False))
    nnx.update(model, nnx.from_flat_state(values))
    return model


def load_layer(layer: nnx.Module, state_dict: Mapping[str, np.ndarray]) -> nnx.Module:
    """A mixer layer (e.g. `ccq_jax.layers.GatedDeltaNet2`) filled, in place, with the tensors of an fla layer's
    state_dict (`q_proj.weight`, `A_log`, ...: fla's names without a model's `model.layers.{i}.attn.`), laid out by
    fla's rules; ValueError naming missing or unexpected tensors."""
    rules = {path: (name.lstrip("."), layout)  # a leaf of the layer itself: ".A_log"
             for path, (name, layout) in _layout_rules(layer, lambda path: ".".join(map(str, path))).items()}
    names = {name for name, _ in rules.values()}
    missing, unexpected = names - set(state_dict), set(state_dict) - names
    if missing or unexpected:
        raise ValueError(f"state_dict: does not match the layer {type(layer).__name__}: missing "
                         f"[{_names(missing)}]; unexpected [{_names(unexpected)}]")
    current = dict(nnx.to_flat_state(nnx.state(layer, nnx.Param)))
    nnx.update(layer, nnx.from_flat_state({
        path: jnp.asarray(layout.from_stored(np.asarray(state_dict[name])), current[path][...].dtype)
        for path, (name, layout) in rules.items()}))
    return layer
