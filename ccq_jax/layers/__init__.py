"""Flax NNX layers: thin modules that hold parameters and call into `ccq_jax.ops`.

Mixers (token mixing; each `layer(x, segment_ids=None, cache=None) -> (y, cache)`):
`GatedLinearAttention`, `GatedDeltaNet`, `KimiDeltaAttention` (KDA), `GatedDeltaNet2` (GDN-2), `Mamba2` (SSD) (each
optionally with the CCQ read, `ccq=CCQConfig(...)`)
and softmax `Attention` with RoPE (the Transformer's and a hybrid's: GQA, sliding window, partial RoPE or NoPE,
output gate). Shared blocks: `RMSNorm`, `GatedRMSNorm` (swish or sigmoid gate),
`GatedMLP` (fla's width rule `mlp_width`), `ShortConvolution`. Parameter names follow fla's
state_dict; logical sharding axes are listed in `ccq_jax.layers.params`. `KernelPolicy` picks the
linear-attention layers' implementations (`ccq_jax.ops` impls) and the decode step's LM head.
"""

from ccq_jax.layers.attention import Attention
from ccq_jax.layers.cache import KVCache, RecurrentCache
from ccq_jax.layers.ccq import CCQConfig, CCQGate
from ccq_jax.layers.conv import ShortConvolution
from ccq_jax.layers.gated_deltanet import GatedDeltaNet
from ccq_jax.layers.gdn2 import GatedDeltaNet2
from ccq_jax.layers.gla import GatedLinearAttention
from ccq_jax.layers.kda import KimiDeltaAttention
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.layers.mamba2 import Mamba2
from ccq_jax.layers.mlp import GatedMLP, mlp_width
from ccq_jax.layers.norm import GatedRMSNorm, RMSNorm
from ccq_jax.layers.params import AXES

__all__ = ["AXES", "Attention", "CCQConfig", "CCQGate", "GatedDeltaNet", "GatedDeltaNet2", "GatedLinearAttention",
           "GatedMLP", "GatedRMSNorm", "KVCache", "KernelPolicy", "KimiDeltaAttention", "Mamba2", "RMSNorm",
           "RecurrentCache", "ShortConvolution", "mlp_width"]
