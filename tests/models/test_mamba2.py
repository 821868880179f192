"""Mamba2 models: fla's config fields and presets, blocks without MLPs under fla's names, the forward and its
gradients, the scanned layers, decoding equal to the forward (pure, CCQ and hybrid), generation, FLOPs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ccq_jax.inference import generate
from ccq_jax.layers import Attention, Mamba2
from ccq_jax.models import Mamba2Config, config_from_dict, count_params, get_config
from ccq_jax.models.flops import mixer_forward_flops
from ccq_jax.models.state_dict import fla_rules
from tests.builders import build, forward, prefill_then_decode, rel_rms, token_ids

T, PROMPT = 18, 11
SMALL = dict(initializer_range=0.1, n_groups=2, **{"kernel.chunk_size": 4})
CASES = {"mamba2": ("mamba2-tiny", SMALL), "ccq-mamba2": ("ccq-mamba2-tiny", dict(SMALL, D_has_hdim=True)),
         "ccq-mamba2-hybrid": ("ccq-mamba2-hybrid-tiny", SMALL)}


def test_config_has_fla_defaults_and_derives_the_heads():
    cfg = Mamba2Config()
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.state_size, cfg.head_dim, cfg.expand, cfg.norm_eps) == (
        2048, 48, 128, 64, 2, 1e-5)
    assert cfg.num_heads is None and Mamba2Config(num_heads=64).num_heads == 64
    assert 1.3e9 < count_params(get_config("mamba2-1.3b")) < 1.4e9
    assert get_config("ccq-mamba2-1.3b").ccq is not None
    tiny = get_config("mamba2-tiny")
    assert config_from_dict(tiny.to_dict()) == tiny and get_config("mamba2-tiny", hidden_size=128).hidden_size == 128


@pytest.mark.parametrize("fields, match", [
    (dict(num_heads=32), "num_heads: must equal int"), (dict(head_dim=48), "head_dim: must divide"),
    (dict(n_groups=3), "n_groups: must divide the 64 heads"), (dict(hidden_ratio=2), "hidden_ratio: Mamba2 blocks"),
    (dict(use_short_conv=True), "use_short_conv: Mamba2"), (dict(dt_limit=(0.5, 0.1)), "dt_limit: expected 0 <="),
    (dict(A_init_range=(1.0,)), "A_init_range: expected two"), (dict(dt_min=0.5), "dt_min, dt_max"),
    (dict(hidden_act="gelu"), "hidden_act: expected"), (dict(conv_init=-1.0), "conv_init")])
def test_bad_fields_are_refused_by_name(fields, match):
    with pytest.raises(ValueError, match=match):
        Mamba2Config(**fields)


def test_blocks_are_a_norm_and_the_mixer_under_fla_names():
    model = build("ccq-mamba2-hybrid-tiny", SMALL)
    assert [type(layer.attn) for layer in model.layers] == [Mamba2, Mamba2, Attention, Mamba2]
    assert not any(layer.has_mlp or hasattr(layer, "mlp") for layer in model.layers)
    names = {name for name, _ in fla_rules(model).values()}
    assert {"backbone.embeddings.weight", "backbone.norm_f.weight", "lm_head.weight", "backbone.layers.0.norm.weight",
            "backbone.layers.0.mixer.in_proj.weight", "backbone.layers.0.mixer.conv1d.weight",
            "backbone.layers.0.mixer.conv1d.bias", "backbone.layers.0.mixer.ccq.weight",
            "backbone.layers.2.mixer.q_proj.weight"} <= names
    assert not any(n.startswith("model.") or ".mlp" in n for n in names)


def test_gradients_are_finite_and_reach_every_parameter():
    model = build(*CASES["ccq-mamba2"])
    ids = token_ids((2, 12), seed=1)
    segments = jnp.asarray([[0] * 5 + [1] * 7, [2] * 12], jnp.int32)

    def loss(m):
        logits = m(ids[:, :-1], segment_ids=segments[:, :-1])
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), ids[:, 1:, None], -1))

    value, grads = nnx.value_and_grad(loss)(model)
    assert np.isfinite(float(value))
    for path, g in nnx.to_flat_state(nnx.state(grads)):
        assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).max()) > 0, path


def test_scanned_layers_equal_the_loop():
    name, overrides = CASES["ccq-mamba2-hybrid"]
    ids, segments = token_ids((2, 12), seed=1), jnp.asarray([[0] * 5 + [1] * 7, [2] * 12], jnp.int32)
    scanned = build(name, dict(overrides, scan_layers=True))
    assert rel_rms(forward(scanned, ids, segments), forward(build(name, overrides), ids, segments)) < 1e-6


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_then_decode_reproduces_the_full_forward(case):
    """Row 0 packs two documents (the second continues through decoding); row 1 is one document."""
    model = build(*CASES[case])
    ids = token_ids((2, T), seed=5)
    segments = jnp.asarray([[0] * 4 + [1] * (T - 4), [3] * T], jnp.int32)
    full = forward(model, ids, segments)
    assert rel_rms(prefill_then_decode(model, ids, segments, PROMPT), full) < 1e-5


def test_generate_with_per_row_prompt_lengths_matches_the_forward():
    model = build(*CASES["ccq-mamba2"])
    prompt = token_ids((2, 6), seed=3)
    new = generate(model, prompt, 4, prompt_lengths=[6, 3])
    for row, length in enumerate((6, 3)):
        seq = jnp.concatenate([prompt[row:row + 1, :length], new[row:row + 1, :3].astype(prompt.dtype)], axis=1)
        greedy = jnp.argmax(forward(model, seq)[0, length - 1:], axis=-1)  # the forward's choice after each token
        np.testing.assert_array_equal(greedy, new[row])


def test_mixer_flops_count_the_ssd_read_and_the_conv():
    cfg = get_config("mamba2-1.3b")
    h, n, p, c = 64, 128, 64, 64
    assert mixer_forward_flops(cfg, 4096) == h * (4 * n * p + 2 * c * (n + p)) + 2 * 4 * (4096 + 2 * 128)
