"""Language models: configs and presets (`get_config`), `CausalLM`, parameter counting.

    from flax import nnx
    from ccq_jax.models import CausalLM, get_config
    model = CausalLM(get_config("ccq-gla-tiny"), rngs=nnx.Rngs(0))
    logits = model(input_ids)                          # [B, T, vocab]

`python -m ccq_jax.models` prints every preset's parameter count.
"""

from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.layers.kernel_policy import KernelPolicy
from ccq_jax.models.causal_lm import Block, CausalLM, check_token_ids, init_split, lm_logits
from ccq_jax.models.config import (
    FAMILIES, GatedDeltaNet2Config, GatedDeltaNetConfig, GLAConfig, HybridAttention, KDAConfig, LinearAttentionConfig,
    Mamba2Config, ModelConfig, TransformerConfig, config_from_dict, layer_mixers,
)
from ccq_jax.models.params import abstract_model, count_params, with_config, with_dtype
from ccq_jax.models.presets import PRESETS, get_config

__all__ = ["Block", "CCQConfig", "CausalLM", "FAMILIES", "GLAConfig", "GatedDeltaNet2Config", "GatedDeltaNetConfig",
           "HybridAttention", "KDAConfig", "KernelPolicy", "LinearAttentionConfig", "Mamba2Config", "ModelConfig",
           "PRESETS", "TransformerConfig", "abstract_model", "check_token_ids", "config_from_dict", "count_params",
           "get_config", "init_split", "layer_mixers", "lm_logits",
           "with_config", "with_dtype"]
