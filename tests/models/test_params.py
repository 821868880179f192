"""Parameter counts (fla's 1.3B models; exact formulas for the tiny presets), names and logical axes."""

import jax
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

from ccq_jax.layers import AXES
from ccq_jax.models import abstract_model, count_params, get_config

FLA_1_3B = {"gla-1.3b": 1365.5e6, "gdn-1.3b": 1387.3e6}  # fla's default configs, counted with fla


@pytest.mark.parametrize("name", list(FLA_1_3B))
def test_1_3b_parameter_counts_match_fla(name):
    assert abs(count_params(get_config(name)) / FLA_1_3B[name] - 1) < 0.005


def _shared(c):
    """Embeddings, LM head, final norm, and per layer the two norms and the SwiGLU MLP."""
    head = 0 if c.tie_word_embeddings else c.vocab_size * c.hidden_size
    per_layer = 2 * c.hidden_size + 3 * c.hidden_size * c.mlp_width
    return c.vocab_size * c.hidden_size + head + c.hidden_size, per_layer


def _expected(c):
    d = c.hidden_size
    if c.family == "transformer":
        mixer = 4 * d * d
    elif c.family == "gla":
        kd, vd = d // 2, d  # expand_k 0.5, expand_v 1
        mixer = 2 * d * kd + 3 * d * vd + d * 16 + 16 * kd + kd + vd // c.num_heads
        gate_heads, gate_k = c.num_heads, kd // c.num_heads
    else:
        kd, vd = c.num_heads * c.head_dim, 2 * c.num_heads * c.head_dim  # expand_v 2
        mixer = 2 * d * kd + 3 * d * vd + 2 * d * c.num_heads + 2 * c.num_heads + 4 * (2 * kd + vd) + 2 * c.head_dim
        gate_heads, gate_k = c.num_heads, c.head_dim
    if getattr(c, "ccq", None) is not None:
        mixer += gate_heads * (gate_k + 1)
    outside, per_layer = _shared(c)
    return outside + c.num_hidden_layers * (per_layer + mixer)


@pytest.mark.parametrize("name", ["transformer-tiny", "gla-tiny", "ccq-gla-tiny", "gdn-tiny", "ccq-gdn-tiny",
                                  "gla-340m", "ccq-gdn-340m", "ccq-gla-100m", "gdn-100m"])
def test_parameter_counts_follow_the_layer_definitions(name):
    cfg = get_config(name)
    assert cfg.mlp_width == {64: 256, 768: 2048, 1024: 2816}[cfg.hidden_size]  # fla's GatedMLP rule
    assert count_params(cfg) == _expected(cfg)


def _params(name, **overrides):
    return nnx.state(abstract_model(get_config(name, **overrides)), nnx.Param)


FLA_GLA_LAYER = {"attn_norm.weight", "attn.q_proj.kernel", "attn.k_proj.kernel", "attn.v_proj.kernel",
                 "attn.g_proj.kernel", "attn.gk_proj.0.kernel", "attn.gk_proj.1.kernel", "attn.gk_proj.1.bias",
                 "attn.g_norm_swish_gate.weight", "attn.o_proj.kernel", "mlp_norm.weight", "mlp.gate_proj.kernel",
                 "mlp.up_proj.kernel", "mlp.down_proj.kernel"}
FLA_GDN_LAYER = {"attn_norm.weight", "attn.q_proj.kernel", "attn.k_proj.kernel", "attn.v_proj.kernel",
                 "attn.a_proj.kernel", "attn.b_proj.kernel", "attn.A_log", "attn.dt_bias", "attn.q_conv1d.kernel",
                 "attn.k_conv1d.kernel", "attn.v_conv1d.kernel", "attn.g_proj.kernel", "attn.o_norm.weight",
                 "attn.o_proj.kernel", "mlp_norm.weight", "mlp.gate_proj.kernel", "mlp.up_proj.kernel",
                 "mlp.down_proj.kernel"}


@pytest.mark.parametrize("name,layer", [("gla-tiny", FLA_GLA_LAYER), ("gdn-tiny", FLA_GDN_LAYER)])
def test_parameter_paths_are_fla_state_dict_names(name, layer):
    """fla's `model.layers.{i}.<name>.weight` is our `layers.{i}.<name>.kernel` (Linear: transposed)."""
    paths = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(_params(name))}
    expected = {"embeddings.embedding", "norm.weight", "lm_head.kernel"}
    expected |= {f"layers.{i}.{n}" for i in range(2) for n in layer}
    assert paths == expected


@pytest.mark.parametrize("name,overrides", [("transformer-tiny", {}), ("ccq-gla-tiny", {"use_short_conv": True}),
                                            ("ccq-gdn-tiny", {})])
def test_every_parameter_has_logical_axes(name, overrides):
    flat = {".".join(map(str, p)): v for p, v in nnx.to_flat_state(_params(name, **overrides))}
    axes = {path: var.get_metadata()["out_sharding"] for path, var in flat.items()}
    for path, var in flat.items():
        assert len(axes[path]) == var.value.ndim, path
        assert all(n is None or n in AXES for n in axes[path]), path
    assert axes["embeddings.embedding"] == ("vocab", "embed")
    assert axes["lm_head.kernel"] == ("embed", "vocab")
    assert axes["layers.0.mlp.down_proj.kernel"] == ("mlp", "embed")
    assert axes["layers.0.attn.q_proj.kernel"] == ("embed", "heads")
    assert axes["layers.1.attn.o_proj.kernel"] == ("heads", "embed")
    assert axes["norm.weight"] == ("norm",)
    if name != "transformer-tiny":
        assert axes["layers.0.attn.ccq.weight"] == ("heads", "kv")
        assert axes["layers.0.attn.q_conv1d.kernel"] == ("conv", "heads")
    specs = nnx.to_flat_state(nnx.get_partition_spec(_params(name, **overrides)))  # what a rules table maps
    assert {".".join(map(str, p)): v.value for p, v in specs} == {p: PartitionSpec(*a) for p, a in axes.items()}


def test_parameters_carry_param_dtype():
    state = _params("gla-tiny", dtype="bfloat16", param_dtype="float32")
    assert {x.dtype for x in jax.tree.leaves(state)} == {jax.numpy.dtype("float32")}
