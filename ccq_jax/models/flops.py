"""Training FLOPs per token of a model, its sequence mixers' own work included: the numerator of MFU.

The usual 6 N (N the parameters) counts the matrix products of the weights and nothing of the mixers, so it
understates linear attention's work and makes models of different mixers incomparable (flame's MFU, which uses
the Transformer's formula for every model, has passed 100 %). Here, per token of a training step (forward and
backward, the backward twice the forward's work; recomputation under remat is not counted, as MFU does not):

    dense  = 6 * N_matmul            the weights' products: every `kernel` of the model and the LM head
                                     (the tied embedding counted once, as the head); not the embedding lookup,
                                     norms, gates' elementwise work or the short convolutions' weights
    mixer  = 3 * sum over layers of the mixer's forward FLOPs per token:
      softmax attention   2 (T + 1) H Dh            QK^T and AV over the (T + 1) / 2 keys a causal token sees
                                                    (H Dh = the model width D); with a window W, 4 n H Dh over
                                                    the n = mean_t min(t + 1, W) keys it sees (a hybrid's
                                                    attention layers count so, its other layers as their family)
      GLA (chunk C)       H (4 Dk Dv + 2 C (Dk + Dv))
                          q S and the state update k^T v (2 Dk Dv each), the chunk's scores q k^T and their
                          product with v (2 C Dk and 2 C Dv: full C x C blocks, as the kernels compute them)
      gated delta rule    H (6 Dk Dv + 2 C (3 Dk + 2 Dv) + C^2 / 3)
                          GLA's four terms, the WY/UT form's k k^T (2 C Dk), its triangular solve (C^3 / 3 a
                          chunk), W = A (beta k) and U = A (beta v) (2 C Dk, 2 C Dv), and W S (2 Dk Dv)
      KDA, GDN-2          the gated delta rule's term: the same products (the erase vector a in place of beta k,
                          the decay per channel elementwise; XLA counts 1.26x the formula for KDA's chunk form,
                          GLA's exact diagonal blocks included, against 0.90x for the gated delta rule's)
      CCQ read (+)        H (2 Dk^2 + n (2 Dk^2 + 4 C Dk))
                          the covariance update k^T k (2 Dk^2) and n products Sigma_t x: x Sigma (2 Dk^2) and the
                          chunk's part, scores x k^T and their product with k (2 C Dk each); n = 1 for the
                          first-order read, `terms` for Neumann, `iterations` + 1 for conjugate gradient
      Mamba2 (SSD)        GLA's term with Dk = N (the state), Dv = P (the head), H = I / P heads; its conv1d
                          2 W (I + 2 G N)
      short convolutions  2 W (channels of q, k and v)
    total  = dense + mixer

with T the row's length, H the heads of the recurrence, Dk and Dv their key and value widths, C the chunk
(`kernel.chunk_size`, else 64, the kernels' chunk) and W the convolution's width. Elementwise work (gates, exp,
norms, the loss) is left out of both terms. tests/models/test_flops.py checks each mixer's term against XLA's
own count of the op's chunk form.
"""

import dataclasses

from flax import nnx

from ccq_jax.layers.gated_deltanet import gdn_dims
from ccq_jax.layers.gla import gla_dims
from ccq_jax.layers.mamba2 import mamba2_dims
from ccq_jax.models.config import ModelConfig, layer_mixers
from ccq_jax.models.params import abstract_model

DEFAULT_CHUNK = 64  # the chunk the kernels run at when the kernel policy names none
READ_PRODUCTS = {"first_order": lambda ccq: 1, "neumann": lambda ccq: ccq.terms, "cg": lambda ccq: ccq.iterations + 1}


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """Training FLOPs per token (forward and backward): the weights' products and the mixers' own work."""

    dense: float
    mixer: float

    @property
    def total(self) -> float:
        return self.dense + self.mixer


def matmul_params(cfg: ModelConfig) -> int:
    """N_matmul: the parameters used as matrices in products (every `kernel` but the convolutions', and the LM
    head or, tied, the embedding once)."""
    params = nnx.state(abstract_model(cfg), nnx.Param)
    total = 0
    for path, value in nnx.to_flat_state(params):
        names = [str(p) for p in path]
        if names[-1] == "kernel" and not any("conv" in n for n in names):
            total += value.get_value().size
    if cfg.tie_word_embeddings:
        total += cfg.vocab_size * cfg.hidden_size
    return total


def attention_forward_flops(hidden_size: int, seq_len: int, window_size: int | None = None) -> float:
    """A softmax attention layer's forward FLOPs per token: QK^T and AV, 2 H Dh (= 2 D) each per key seen."""
    if window_size is None or window_size >= seq_len:
        return 2.0 * (seq_len + 1) * hidden_size
    seen = (window_size * (window_size + 1) / 2 + (seq_len - window_size) * window_size) / seq_len
    return 4.0 * seen * hidden_size


def mixer_forward_flops(cfg: ModelConfig, seq_len: int) -> float:
    """One layer's sequence-mixer forward FLOPs per token (see the module docstring): the family's own mixer (a
    hybrid's attention layers: `attention_forward_flops`)."""
    if cfg.family == "transformer":
        return attention_forward_flops(cfg.hidden_size, seq_len)
    chunk = cfg.kernel.chunk_size or DEFAULT_CHUNK
    if cfg.family == "mamba2":
        dims = mamba2_dims(cfg.hidden_size, cfg.head_dim, cfg.state_size, cfg.expand, cfg.n_groups)
        heads, dk, dv = dims.num_heads, cfg.state_size, cfg.head_dim
        flops = heads * (4 * dk * dv + 2 * chunk * (dk + dv))
        channels, width = dims.conv_dim, cfg.conv_kernel
    elif cfg.family == "gla":
        dims = gla_dims(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.expand_k, cfg.expand_v)
        heads, dk, dv = cfg.num_heads, dims.head_k_dim, dims.head_v_dim
        flops = heads * (4 * dk * dv + 2 * chunk * (dk + dv))
        channels = 2 * dims.key_dim + dims.value_dim
    else:
        dims = gdn_dims(cfg.num_heads, cfg.head_dim, cfg.expand_v, cfg.num_v_heads)
        heads, dk, dv = dims.num_v_heads, cfg.head_dim, dims.head_v_dim
        flops = heads * (6 * dk * dv + 2 * chunk * (3 * dk + 2 * dv) + chunk**2 / 3)
        channels = 2 * dims.key_dim + dims.value_dim
    if cfg.ccq is not None:
        products = READ_PRODUCTS[cfg.ccq.read](cfg.ccq)
        flops += heads * (2 * dk**2 + products * (2 * dk**2 + 4 * chunk * dk))
    if cfg.family == "mamba2":
        flops += 2 * width * channels
    elif cfg.use_short_conv:
        flops += 2 * cfg.conv_size * channels
    return float(flops)


def mfu(flops: FlopCount, n_params: int, tokens_per_s: float, peak_flops: float) -> dict:
    """{"mfu": this module's count, "mfu_6n": 6 N (all parameters) as before} at `tokens_per_s` against
    `peak_flops` (all devices' dense peak); {} when the peak is unknown (0)."""
    if not peak_flops:
        return {}
    return {"mfu": flops.total * tokens_per_s / peak_flops, "mfu_6n": 6 * n_params * tokens_per_s / peak_flops}


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> FlopCount:
    """FLOPs per token of a training step on rows of `seq_len` tokens (see the module docstring)."""
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ValueError(f"seq_len: expected a positive integer, got {seq_len!r}")
    specs = layer_mixers(cfg)
    attention = sum(attention_forward_flops(cfg.hidden_size, seq_len, s.window_size) for s in specs if s is not None)
    own = 3.0 * specs.count(None) * mixer_forward_flops(cfg, seq_len)
    return FlopCount(dense=6.0 * matmul_params(cfg), mixer=own + 3.0 * attention)
