"""The kernels' guards against gate modes and shapes they do not take: a clear ValueError before anything is
launched (the backend never passes these; a caller of `pallas_kernels` might)."""

import jax.numpy as jnp
import pytest

from pallas_kernels import linear_attention as la
from pallas_kernels import linear_attention_grad as la_grad

B, T, H, K, C = 1, 64, 1, 16, 64


def _tokens(width=K):
    return jnp.zeros((B, T, H, width), jnp.float32)


def test_chunk_states_refuses_per_head_gates():
    x = _tokens()
    with pytest.raises(ValueError, match=r"chunk_states: gates per channel or none \(the gated delta rule's "
                                         r"per-head factors go in as mask and keep\)"):
        la.chunk_states(x, x, jnp.zeros((B, T, H)), None, jnp.ones((B, 1)), jnp.zeros((B, H, K, K)), chunk=C,
                        gate="head", interpret=True)


def test_chunk_out_refuses_per_channel_gates():
    x = _tokens()
    with pytest.raises(ValueError, match=r"chunk_out: per-channel gates are applied to x beforehand \(gated_inputs\)"):
        la.chunk_out(x, x, jnp.ones((B, T)), None, jnp.zeros((B, H, T, C)), x, chunk=C, gate="channel",
                     transpose_scores=False, s_inter=1.0, s_intra=1.0, out_dtype=jnp.float32, interpret=True)


@pytest.mark.parametrize("gate,v_width,got", [("channel", K, "gate='channel', K=16, V=16"),
                                              (None, 2 * K, "gate=None, K=16, V=32")])
def test_chunk_dqk_takes_scores_only_for_ungated_square_attention(gate, v_width, got):
    x, v = _tokens(), _tokens(v_width)
    masks, states = jnp.ones((B, T)), jnp.zeros((B, 1, H, K, v_width))
    scores = jnp.zeros((B, H, T, C))
    with pytest.raises(ValueError, match=r"chunk_dqk: scores \(v the keys\) need no gates and v's width equal to "
                                         r"k's, got " + got):
        la_grad.chunk_dqk(x, x, v, v, x if gate else None, masks, masks, jnp.ones((B, 1)), states, states, scores, None,
                     chunk=C, gate=gate, scale=1.0, interpret=True, scores=scores)


@pytest.mark.parametrize("gate,g", [("head", jnp.zeros((B, T, H))), ("channel", jnp.zeros((B, T, H, K)))])
def test_intra_scores_sums_keys_only_without_gates(gate, g):
    x = _tokens()
    with pytest.raises(ValueError, match=rf"intra_scores: key_sums is for ungated attention, got gate='{gate}'"):
        la.intra_scores(x, x, g, jnp.zeros((B, T), jnp.int32), chunk=C, gate=gate, interpret=True, key_sums=True)
