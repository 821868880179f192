"""Named model presets: `{transformer,gla,gdn,ccq-gla,ccq-gdn}-{tiny,100m,340m,1.3b}`, `[ccq-]mamba2-{tiny,1.3b}`,
hybrids, KDA and GDN-2 and `get_config`.

1.3b = fla's default configs (GLA 24 x 2048, 4 heads; Gated DeltaNet 21 x 2048, 6 heads of
256; Transformer 24 x 2048, 32 heads). 340m: GLA and Transformer follow fla's
`legacy/training/configs/{gla,transformer}_340M.json` (1024 wide, 24 layers, tied
embeddings); Gated DeltaNet keeps fla's 6 * D^2 mixer budget at D = 1024 (6 heads of 128,
21 layers, tied). 100m: 768 wide, tied, for small-scale studies (about 100M parameters at a
32K vocabulary): GLA 12 layers of 3 heads (K = 128, V = 256 per head, as in fla's larger
configs), Gated DeltaNet 11 layers of 4 heads of 128 (its mixer is 5.3 D^2 to GLA's 4 D^2),
Transformer 12 layers of 12 heads. tiny: 64 wide, 2 layers, vocabulary 256, for tests and CPU
demos.
Hybrids (softmax attention on some layers through fla's `attn` entry, the rest the family's mixer):
`{gla,gdn}-hybrid-tiny` (4 layers; GLA: grouped-query attention on layers 1 and 3; Gated DeltaNet: an
8-token sliding window on layer 3) and `gdn-hybrid-1.3b`, fla's Gated DeltaNet 1.3B with attention
(16 heads of 128, fla's defaults otherwise) on every fourth layer (3, 7, 11, 15, 19; 1.35B parameters).
Mamba2 (fla's `Mamba2Config`, blocks without MLPs): `mamba2-1.3b` is fla's default (48 x 2048, 64 heads of 64,
state 128, one group; 1.37B parameters; the Mamba2 paper's 1.3B baseline has the same shape), `mamba2-tiny` 8 heads
of 16 with a 16-wide state, `mamba2-hybrid-tiny` (4 layers, grouped-query attention on layer 2).
KDA and Gated DeltaNet-2 (`{kda,gdn2}-{tiny,1.3b}`): 1.3b is fla's default `KDAConfig` (24 x 2048, 16 heads of
128, expand_v 1; fla publishes no KDA 1.3B config file); GDN-2 the same model with fla's GDN-2 layer on 21 layers,
since its mixer (q, k, v, o, b and w projections: 6 D^2) is Gated DeltaNet's size and fla's GDN 1.3B has 21.
`ccq-*` adds the CCQ read with the default `CCQConfig` (learned gate) to every family's own layers.
"""

from ccq_jax import configlib
from ccq_jax.layers.ccq import CCQConfig
from ccq_jax.models.config import (
    GatedDeltaNet2Config, GatedDeltaNetConfig, GLAConfig, HybridAttention, KDAConfig, Mamba2Config, ModelConfig,
    TransformerConfig, apply_overrides,
)

TINY = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2)

_BACKBONES = {
    "transformer": (TransformerConfig, {
        "tiny": dict(TINY, num_heads=4),
        "100m": dict(hidden_size=768, num_hidden_layers=12, num_heads=12, tie_word_embeddings=True),
        "340m": dict(hidden_size=1024, num_heads=16, tie_word_embeddings=True),
        "1.3b": {},
    }),
    "gla": (GLAConfig, {
        "tiny": dict(TINY, num_heads=4),
        "100m": dict(hidden_size=768, num_hidden_layers=12, num_heads=3, tie_word_embeddings=True),
        "340m": dict(hidden_size=1024, tie_word_embeddings=True),
        "1.3b": {},
        "hybrid-tiny": dict(TINY, num_heads=4, num_hidden_layers=4,
                            attn=(HybridAttention(layers=(1, 3), num_heads=4, num_kv_heads=2),)),
    }),
    "gdn": (GatedDeltaNetConfig, {
        "tiny": dict(TINY, num_heads=2, head_dim=16),
        "100m": dict(hidden_size=768, num_hidden_layers=11, num_heads=4, head_dim=128, tie_word_embeddings=True),
        "340m": dict(hidden_size=1024, num_heads=6, head_dim=128, tie_word_embeddings=True),
        "1.3b": {},
        "hybrid-tiny": dict(TINY, num_heads=2, head_dim=16, num_hidden_layers=4,
                            attn=(HybridAttention(layers=(3,), num_heads=4, window_size=8),)),
        "hybrid-1.3b": dict(attn=(HybridAttention(layers=(3, 7, 11, 15, 19), num_heads=16),)),
    }),
    "mamba2": (Mamba2Config, {
        "tiny": dict(TINY, head_dim=16, state_size=16),
        "1.3b": {},
        "hybrid-tiny": dict(TINY, head_dim=16, state_size=16, num_hidden_layers=4,
                            attn=(HybridAttention(layers=(2,), num_heads=4, num_kv_heads=2),)),
    }),
    "kda": (KDAConfig, {
        "tiny": dict(TINY, num_heads=2, head_dim=16),
        "1.3b": {},
    }),
    "gdn2": (GatedDeltaNet2Config, {
        "tiny": dict(TINY, num_heads=2, head_dim=16),
        "1.3b": dict(num_hidden_layers=21),
    }),
}


def _presets() -> dict:
    presets = {}
    for family, (cls, sizes) in _BACKBONES.items():
        for size, fields in sizes.items():
            presets[f"{family}-{size}"] = (cls, fields)
            if family != "transformer":
                presets[f"ccq-{family}-{size}"] = (cls, dict(fields, ccq=CCQConfig()))
    return presets


PRESETS = _presets()


def get_config(name: str, **overrides) -> ModelConfig:
    """The preset `name` with any config field overridden, e.g. get_config("ccq-gla-tiny", dtype="bfloat16").

    Dotted keys reach into the CCQ config and the kernel policy: `get_config("ccq-gdn-tiny", **{"ccq.mode": "off"})`,
    `get_config("gla-tiny", **{"kernel.impl": "pallas"})`; `ccq={"mode": "fixed"}` replaces it and `ccq=None`
    removes it (`kernel=KernelPolicy(...)` replaces the policy).
    """
    configlib.check_choice("name", name, PRESETS)
    cls, fields = PRESETS[name]
    return apply_overrides(cls(**fields), overrides)
