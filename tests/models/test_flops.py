"""`ccq_jax.models.flops`: each mixer's term against XLA's own count of the op's chunk form, the weights' term
against the parameters it should hold, and MFU's two numerators."""

import jax
import jax.numpy as jnp
import pytest

import ccq_jax.ops as ops
from ccq_jax.models import count_params, get_config
from ccq_jax.models.flops import matmul_params, mfu, mixer_forward_flops, train_flops_per_token

B, T, H, K, V, C = 1, 512, 2, 64, 64, 64


def _xla_flops_per_head_token(fn, *shapes):
    args = [jnp.full(s, -0.1 if i == 3 else 0.5, jnp.float32) for i, s in enumerate(shapes)]
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"] / (B * T * H)


def _one_head_model(preset, **fields):
    """A preset reduced to what the formula reads for one layer: H heads of K x V, chunk C, no convolution."""
    if "gla" in preset:
        return get_config(preset, hidden_size=H * V, num_heads=H, expand_k=K / V, expand_v=1.0,
                          use_short_conv=False, **{"kernel.chunk_size": C}, **fields)
    return get_config(preset, num_heads=H, head_dim=K, expand_v=V / K, use_short_conv=False,
                      **{"kernel.chunk_size": C}, **fields)


TOKEN, HEAD = (B, T, H, K), (B, T, H)
CASES = {  # name: (model config, the op's chunk form, its input shapes)
    "gla": (lambda: _one_head_model("gla-tiny"),
            lambda q, k, v, g: ops.gla(q, k, v, g, impl="chunk", chunk_size=C)[0], (TOKEN, TOKEN, TOKEN, TOKEN)),
    "gated_delta_rule": (lambda: _one_head_model("gdn-tiny"),
                         lambda q, k, v, g, b: ops.gated_delta_rule(q, k, v, g, b, impl="chunk", chunk_size=C)[0],
                         (TOKEN, TOKEN, TOKEN, HEAD, HEAD)),
    # KDA and GDN-2 count as the gated delta rule: the same products, the decay per channel being elementwise
    "kda": (lambda: _one_head_model("kda-tiny"),
            lambda q, k, v, g, b: ops.kda(q, k, v, g, b, impl="chunk", chunk_size=C)[0],
            (TOKEN, TOKEN, TOKEN, TOKEN, HEAD)),
}
READS = {  # the CCQ read alone: the CCQ model's term minus its backbone's
    "first_order": {},
    "cg": {"ccq.read": "cg", "ccq.iterations": 3, "ccq.lambda_max": 4.0},
    "neumann": {"ccq.read": "neumann", "ccq.terms": 2},
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_backbone_term_is_within_xla_s_count_of_its_chunk_form(name):
    """XLA counts the elementwise work too (decays, masks, exp) and GLA's exact 16 x 16 diagonal blocks: its count
    lies above the formula's matmul work, by less than 2x; a missing Dk Dv or C term would leave the band."""
    config, op, shapes = CASES[name]
    ratio = _xla_flops_per_head_token(op, *shapes) / (mixer_forward_flops(config(), T) / H)
    assert 0.85 < ratio < 2.0, ratio


@pytest.mark.parametrize("read", list(READS))
def test_the_ccq_read_term_is_within_xla_s_count_of_the_read(read):
    policy = {"first_order": None, "cg": ops.ReadPolicy("cg", iterations=3), "neumann": ops.ReadPolicy(
        "neumann", terms=2)}[read]
    xla = _xla_flops_per_head_token(lambda q, k, lam: ops.ccq_query(q, k, lam, impl="chunk", chunk_size=C,
                                                                   read=policy)[0], TOKEN, TOKEN, HEAD)
    backbone, with_read = _one_head_model("gla-tiny"), _one_head_model("ccq-gla-tiny", **READS[read])
    formula = (mixer_forward_flops(with_read, T) - mixer_forward_flops(backbone, T)) / H
    assert 0.85 < xla / formula < 2.0, (xla, formula)


def test_the_weights_term_counts_matrices_once_and_the_mixer_grows_with_the_read_and_the_length():
    cfg = get_config("transformer-tiny")
    norms = cfg.hidden_size * (2 * cfg.num_hidden_layers + 1)
    assert matmul_params(cfg) == count_params(cfg) - cfg.vocab_size * cfg.hidden_size - norms
    tied = get_config("transformer-tiny", tie_word_embeddings=True)
    assert matmul_params(tied) == matmul_params(cfg)  # the head's matrix, once, whether tied or not
    assert mixer_forward_flops(cfg, 2 * T) > 1.9 * mixer_forward_flops(cfg, T)
    gla, ccq = get_config("gla-tiny"), get_config("ccq-gla-tiny")
    cg = get_config("ccq-gla-tiny", **{"ccq.read": "cg", "ccq.iterations": 4, "ccq.lambda_max": 2.0})
    assert mixer_forward_flops(gla, T) < mixer_forward_flops(ccq, T) < mixer_forward_flops(cg, T)
    assert mixer_forward_flops(gla, T) == mixer_forward_flops(gla, 2 * T)  # linear attention: per token, any T
    count = train_flops_per_token(ccq, T)
    assert count.dense == 6 * matmul_params(ccq) and count.mixer == 3 * ccq.num_hidden_layers * \
        mixer_forward_flops(ccq, T) and count.total == count.dense + count.mixer


def test_mfu_reports_both_numerators_and_nothing_without_a_peak():
    count = train_flops_per_token(get_config("gla-tiny"), 64)
    out = mfu(count, 1000, 2.0, 1e6)
    assert out == {"mfu": count.total * 2.0 / 1e6, "mfu_6n": 6 * 1000 * 2.0 / 1e6}
    assert mfu(count, 1000, 2.0, 0.0) == {}
    with pytest.raises(ValueError, match="seq_len: expected a positive integer, got 0"):
        train_flops_per_token(get_config("gla-tiny"), 0)
