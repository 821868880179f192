"""`CausalLM`: embeddings, pre-norm blocks (mixer + SwiGLU MLP), final norm, LM head, for every family.

Module paths follow fla's state_dict without the `model.` prefix: `embeddings`,
`layers.{i}.attn_norm`, `layers.{i}.attn` (the mixer), `layers.{i}.mlp_norm`, `layers.{i}.mlp`,
`norm`, `lm_head` (absent with tied embeddings). `model(input_ids, segment_ids=None)` returns
fp32 logits; with `cache=` it also returns the updated cache (prefill and decoding run this
same forward; see `ccq_jax.inference`). `hidden_states`, `head` and `lm_logits` are the same
forward in two parts, for losses that apply the head a slice of positions at a time.
`save_pretrained(folder, tokenizer=...)` / `CausalLM.from_pretrained(folder_or_run, step=...)`: fla/HF's
folder layout and ccq-train runs, through `ccq_jax.models.pretrained` (the one loader).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers import Attention, GatedDeltaNet, GatedLinearAttention, GatedMLP, RMSNorm
from ccq_jax.layers.params import linear, normal, sharded
from ccq_jax.ops.internals import head_logits, in_range
from ccq_jax.models.config import GatedDeltaNetConfig, GLAConfig, ModelConfig, TransformerConfig
from ccq_jax.models.pretrained import read_pretrained, save_pretrained


def _mixer(cfg: ModelConfig, rngs: nnx.Rngs) -> nnx.Module:
    common = dict(initializer_range=cfg.initializer_range, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                  rngs=rngs)
    if isinstance(cfg, TransformerConfig):
        return Attention(cfg.hidden_size, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                         rope_theta=cfg.rope_theta, sdpa_impl=cfg.sdpa_impl, **common)
    common.update(ccq=cfg.ccq, kernel=cfg.kernel, use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size,
                  norm_eps=cfg.norm_eps, recompute=cfg.recompute_elementwise)
    if isinstance(cfg, GLAConfig):
        return GatedLinearAttention(
            cfg.hidden_size, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, expand_k=cfg.expand_k,
            expand_v=cfg.expand_v, use_output_gate=cfg.use_output_gate, gate_low_rank_dim=cfg.gate_low_rank_dim,
            gate_logit_normalizer=cfg.gate_logit_normalizer, clamp_min=cfg.clamp_min, **common)
    if isinstance(cfg, GatedDeltaNetConfig):
        return GatedDeltaNet(
            cfg.hidden_size, num_heads=cfg.num_heads, head_dim=cfg.head_dim, expand_v=cfg.expand_v,
            num_v_heads=cfg.num_v_heads, use_gate=cfg.use_gate, allow_neg_eigval=cfg.allow_neg_eigval, **common)
    raise ValueError(f"config: expected a TransformerConfig, GLAConfig or GatedDeltaNetConfig, "
                     f"got {type(cfg).__name__}")


class Block(nnx.Module):
    """x + attn(attn_norm(x)), then + mlp(mlp_norm(.)) (fla's pre-norm block)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        norm = dict(eps=cfg.norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                    recompute=cfg.recompute_elementwise)
        self.attn_norm = RMSNorm(cfg.hidden_size, **norm)
        self.attn = _mixer(cfg, rngs)
        self.mlp_norm = RMSNorm(cfg.hidden_size, **norm)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.mlp_width, std=cfg.initializer_range, rngs=rngs,
                            dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype, recompute=cfg.recompute_elementwise)

    def __call__(self, x, segment_ids, cache):
        h, cache = self.attn(self.attn_norm(x), segment_ids=segment_ids, cache=cache)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), cache


@nnx.remat
def _rematerialised_block(block, x, segment_ids):
    """A block whose activations are recomputed in the backward pass instead of stored (remat_policy "block")."""
    return block(x, segment_ids, None)


def _scanned_blocks(blocks, x, segment_ids, remat: bool):
    """x through `blocks` (identical in structure) as one `lax.scan` over their variables, stacked for the call
    (a copy of the parameters per forward; their gradients come back per layer); with `remat`, each block's
    activations are recomputed in the backward pass."""
    graphdef = nnx.graphdef(blocks[0])
    stacked = jax.tree.map(lambda *layers: jnp.stack(layers), *(nnx.state(block) for block in blocks))

    def body(x, state):
        return nnx.merge(graphdef, state)(x, segment_ids, None)[0], None

    return jax.lax.scan(jax.checkpoint(body) if remat else body, x, stacked)[0]


def _check_ids(name, x, shape=None):
    x = jnp.asarray(x)
    if x.ndim != 2 or not jnp.issubdtype(x.dtype, jnp.integer) or x.shape[1] < 1:
        raise ValueError(f"{name}: expected integer token ids [B, T] with T >= 1, got {x.dtype} {tuple(x.shape)}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name}: expected shape {shape} (that of input_ids), got {tuple(x.shape)}")
    return x


def check_token_ids(name, ids, vocab_size: int) -> None:
    """ValueError naming `name`, the first id outside [0, vocab_size) and `vocab_size`; concrete ids only (traced
    ones, under jit, carry no values and pass unchecked)."""
    in_range(name, ids, 0, vocab_size - 1, f"token ids of a vocabulary of vocab_size={vocab_size}")


class CausalLM(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config: expected a ModelConfig (see ccq_jax.models.get_config), got {config!r}")
        self.config = config
        std, dt, pdt = config.initializer_range, config.compute_dtype, config.params_dtype
        self.embeddings = nnx.Embed(config.vocab_size, config.hidden_size, dtype=dt, param_dtype=pdt,
                                    embedding_init=sharded(normal(std), "vocab", "embed"), rngs=rngs)
        self.layers = nnx.List([Block(config, rngs=rngs) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.norm_eps, dtype=dt, param_dtype=pdt,
                            recompute=config.recompute_elementwise)
        if not config.tie_word_embeddings:
            self.lm_head = linear(config.hidden_size, config.vocab_size, ("embed", "vocab"), std=std, rngs=rngs,
                                  dtype=dt, param_dtype=pdt)

    @classmethod
    def from_pretrained(cls, path, *, step: int | None = None, **overrides) -> "CausalLM":
        """The model of a folder written by `save_pretrained` or of a ccq-train run (its workdir, checkpoints/ or a
        step's folder; `step`: which saved step, default the latest). `overrides` change config fields that keep
        the parameters (e.g. **{"kernel.impl": "recurrent"}, dtype="bfloat16"). Relative paths are the working
        directory's."""
        return read_pretrained(cls, path, step=step, overrides=overrides).model

    def save_pretrained(self, path, *, tokenizer=None) -> None:
        """Write config.json and model.safetensors (and, given a `ccq_jax.tokenizers` tokenizer, its files and a
        generation_config.json) to the folder `path`, in fla/HF's layout; `from_pretrained(path)` reads it back."""
        save_pretrained(self, path, tokenizer=tokenizer)

    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array | None = None, cache: tuple | None = None):
        """input_ids [B, T] -> logits [B, T, vocab] (fp32); with `cache`, (logits, new cache).

        segment_ids [B, T] (integers) marks packed documents: nothing crosses a change of id.
        A cache (`ccq_jax.inference.init_cache`) continues its document at position 0.
        """
        x, new_cache = self.hidden_states(input_ids, segment_ids, cache)
        logits = lm_logits(x, self.head(), self.config.compute_dtype,
                           **self.config.kernel.head_options(cache is not None and input_ids.shape[1] == 1))
        return logits if cache is None else (logits, new_cache)

    def hidden_states(self, input_ids: jax.Array, segment_ids: jax.Array | None = None, cache: tuple | None = None):
        """The final-norm hidden states [B, T, D] that the LM head reads, and the new cache (None without one)."""
        input_ids = _check_ids("input_ids", input_ids)
        check_token_ids("input_ids", input_ids, self.config.vocab_size)
        if segment_ids is not None:
            segment_ids = _check_ids("segment_ids", segment_ids, input_ids.shape)
        if cache is not None and len(cache) != len(self.layers):
            raise ValueError(f"cache: expected one entry per layer ({len(self.layers)}), got {len(cache)}")
        x = self.embeddings(input_ids)
        if self.config.scan_layers and cache is None:
            x = _scanned_blocks(self.layers, x, segment_ids, remat=self.config.remat_policy == "block")
            return self.norm(x), None
        new_cache = []
        for i, layer in enumerate(self.layers):
            if self.config.remat_policy == "block" and cache is None:
                x, layer_cache = _rematerialised_block(layer, x, segment_ids)
            else:
                x, layer_cache = layer(x, segment_ids, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        return self.norm(x), (None if cache is None else tuple(new_cache))

    def head(self) -> jax.Array:
        """The LM head as a [D, vocab] matrix (the embedding table, transposed, with tied embeddings)."""
        return self.embeddings.embedding[...].T if self.config.tie_word_embeddings else self.lm_head.kernel[...]


def lm_logits(x: jax.Array, head: jax.Array, dtype, out_dtype=jnp.float32, *, impl="xla", interpret=None) -> jax.Array:
    """Logits of hidden states x [..., D] against `head` [D, vocab], the product in `dtype` (None: the promoted
    type of the two), as `nnx.Linear` and `nnx.Embed.attend` compute it; returned in `out_dtype` (None: the
    product's own). impl, interpret: `ccq_jax.ops.internals.head_logits`'s ("pallas": a decode step's few rows)."""
    if dtype is not None:
        x, head = x.astype(dtype), head.astype(dtype)
    logits = head_logits(x, head, impl=impl, interpret=interpret)
    return logits if out_dtype is None else logits.astype(out_dtype)
