"""`CausalLM`: embeddings, pre-norm blocks (mixer + SwiGLU MLP), final norm, LM head, for every family.

Module paths follow fla's state_dict without the `model.` prefix: `embeddings`,
`layers.{i}.attn_norm`, `layers.{i}.attn` (the mixer), `layers.{i}.mlp_norm`, `layers.{i}.mlp`,
`norm`, `lm_head` (absent with tied embeddings); Mamba2 blocks have no `mlp_norm` / `mlp` (fla's
`backbone.layers.{i}.norm` / `.mixer` and `backbone.norm_f`: `ccq_jax.models.state_dict` renames).
A hybrid's attention layers (the config's `attn` entries) hold fla's `layers.{i}.attn.{q,k,v,o}_proj` (and `g_proj` with an output gate); with
`scan_layers` the stack runs as `scan_plan` pieces it. `model(input_ids, segment_ids=None)` returns
fp32 logits; with `cache=` it also returns the updated cache (prefill and decoding run this
same forward; see `ccq_jax.inference`). `hidden_states`, `head` and `lm_logits` are the same
forward in two parts, for losses that apply the head a slice of positions at a time.
`save_pretrained(folder, tokenizer=...)` / `CausalLM.from_pretrained(folder_or_run, step=...)`: fla/HF's
folder layout and ccq-train runs, through `ccq_jax.models.pretrained` (the one loader).
"""

import jax
import jax.numpy as jnp
from flax import nnx

from ccq_jax.layers import (
    Attention, GatedDeltaNet, GatedDeltaNet2, GatedLinearAttention, GatedMLP, KimiDeltaAttention, Mamba2, RMSNorm,
)
from ccq_jax.layers.params import linear, normal, sharded
from ccq_jax.layers.remat import block_policy
from ccq_jax.ops.internals import head_logits, in_range
from ccq_jax.models.config import (
    ChannelDecayConfig, GatedDeltaNetConfig, GLAConfig, KDAConfig, Mamba2Config, ModelConfig, TransformerConfig,
    layer_mixers,
)
from ccq_jax.models.pretrained import read_pretrained, save_pretrained


def _mixer(cfg: ModelConfig, rngs: nnx.Rngs, index: int) -> nnx.Module:
    common = dict(initializer_range=cfg.initializer_range, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                  rngs=rngs)
    attention = dict(common, sdpa_impl=cfg.sdpa_impl, axes=cfg.kernel.axes,  # split over the ops' mesh axes
                     interpret=cfg.kernel.interpret)
    if isinstance(cfg, TransformerConfig):
        return Attention(cfg.hidden_size, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
                         rope_theta=cfg.rope_theta, **attention)
    spec = layer_mixers(cfg)[index]
    if spec is not None:
        return Attention(cfg.hidden_size, num_heads=spec.num_heads, num_kv_heads=spec.num_kv_heads,
                         rope_theta=spec.rope_theta, qkv_bias=spec.qkv_bias, window_size=spec.window_size,
                         rotary_dim=spec.rotary_dim, output_gate=spec.output_gate, **attention)
    common.update(ccq=cfg.ccq, kernel=cfg.kernel, norm_eps=cfg.norm_eps, recompute=cfg.recompute_elementwise)
    if isinstance(cfg, Mamba2Config):
        return Mamba2(cfg.hidden_size, **cfg.mixer_options, **common)
    common.update(use_short_conv=cfg.use_short_conv, conv_size=cfg.conv_size)
    if isinstance(cfg, GLAConfig):
        return GatedLinearAttention(
            cfg.hidden_size, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, expand_k=cfg.expand_k,
            expand_v=cfg.expand_v, use_output_gate=cfg.use_output_gate, gate_low_rank_dim=cfg.gate_low_rank_dim,
            gate_logit_normalizer=cfg.gate_logit_normalizer, clamp_min=cfg.clamp_min, **common)
    if isinstance(cfg, GatedDeltaNetConfig):
        return GatedDeltaNet(
            cfg.hidden_size, num_heads=cfg.num_heads, head_dim=cfg.head_dim, expand_v=cfg.expand_v,
            num_v_heads=cfg.num_v_heads, use_gate=cfg.use_gate, allow_neg_eigval=cfg.allow_neg_eigval, **common)
    if isinstance(cfg, ChannelDecayConfig):
        common.update(num_heads=cfg.num_heads, head_dim=cfg.head_dim, expand_v=cfg.expand_v,
                      num_v_heads=cfg.num_v_heads, allow_neg_eigval=cfg.allow_neg_eigval)
        if isinstance(cfg, KDAConfig):
            return KimiDeltaAttention(cfg.hidden_size, safe_gate=cfg.safe_gate, lower_bound=cfg.lower_bound, **common)
        return GatedDeltaNet2(cfg.hidden_size, **common)
    raise ValueError(f"config: expected a TransformerConfig, GLAConfig, GatedDeltaNetConfig, Mamba2Config, KDAConfig "
                     f"or GatedDeltaNet2Config, got {type(cfg).__name__}")


class Block(nnx.Module):
    """x + attn(attn_norm(x)), then + mlp(mlp_norm(.)) (fla's pre-norm block); `index`: the layer it is (a hybrid's
    `attn` entries pick its mixer). Mamba2's blocks (fla's `norm` and `mixer`) stop after the mixer: no MLP."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, index: int = 0):
        norm = dict(eps=cfg.norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                    recompute=cfg.recompute_elementwise)
        self.attn_norm = RMSNorm(cfg.hidden_size, **norm)
        self.attn = _mixer(cfg, rngs, index)
        self.has_mlp = not isinstance(cfg, Mamba2Config)
        if self.has_mlp:
            self.mlp_norm = RMSNorm(cfg.hidden_size, **norm)
            self.mlp = GatedMLP(cfg.hidden_size, cfg.mlp_width, std=cfg.initializer_range, rngs=rngs,
                                dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                                recompute=cfg.recompute_elementwise)

    def __call__(self, x, segment_ids, cache):
        h, cache = self.attn(self.attn_norm(x), segment_ids=segment_ids, cache=cache)
        x = x + h
        return (x + self.mlp(self.mlp_norm(x)) if self.has_mlp else x), cache


def _policy(remat_policy: str, block: Block):
    """The `jax.checkpoint` policy `block` runs under without a cache, or None (`ccq_jax.layers.remat`)."""
    return block_policy(remat_policy, isinstance(block.attn, Attention))


def _block(block, x, segment_ids, remat_policy: str):
    """(x through `block`, None) without a cache, under the block's remat policy."""
    policy = _policy(remat_policy, block)
    # under nnx.capture (`ccq_jax.engagement`: a forward that only reads what the layers sow) there is no backward
    # pass to recompute for, and values sown inside a remat cannot leave it
    if policy is None or hasattr(block.attn, "__captures__"):
        return block(x, segment_ids, None)
    return nnx.remat(lambda block, x, segment_ids: block(x, segment_ids, None), policy=policy)(block, x, segment_ids)


def _scanned_blocks(blocks, period: int, x, segment_ids, remat_policy: str):
    """x through `blocks` as one `lax.scan` over groups of `period` consecutive blocks (blocks i and i + period
    identical in structure), their variables stacked for the call (a copy of the parameters per forward; their
    gradients come back per layer), each block under its remat policy."""

    def step(block):
        graphdef, policy = nnx.graphdef(block), _policy(remat_policy, block)

        def apply(x, state):
            return nnx.merge(graphdef, state)(x, segment_ids, None)[0]

        return apply if policy is None else jax.checkpoint(apply, policy=policy)

    steps = [step(block) for block in blocks[:period]]
    stacked = [jax.tree.map(lambda *layers: jnp.stack(layers), *(nnx.state(block) for block in blocks[j::period]))
               for j in range(period)]

    def body(x, states):
        for apply, state in zip(steps, states):
            x = apply(x, state)
        return x, None

    return jax.lax.scan(body, x, stacked)[0]


def scan_plan(kinds) -> list[tuple[int, int, int]]:
    """How `scan_layers` runs layers of these kinds (`layer_mixers`: equal kinds, identical blocks), as pieces
    (start, stop, period), each scanned over its groups of `period` blocks (a piece of one block is called as it
    is). Greedy from the first layer not yet placed: the period whose repeats cover the most layers (the smallest on
    ties), e.g. a pure model's whole stack at period 1, or fla's GDN 1.3B with attention on layers 3, 7, ..., 19
    as layers 0-19 at period 4 and then layer 20."""
    plan, start, n = [], 0, len(kinds)
    while start < n:
        period, groups = 1, 1
        for p in range(1, (n - start) // 2 + 1):
            m = 1
            while start + (m + 1) * p <= n and kinds[start + m * p:start + (m + 1) * p] == kinds[start:start + p]:
                m += 1
            if m >= 2 and m * p > period * groups:
                period, groups = p, m
        plan.append((start, start + period * groups, period))
        start += period * groups
    return plan


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


def _embeddings(cfg: ModelConfig, rngs: nnx.Rngs, index: int) -> nnx.Embed:
    return nnx.Embed(cfg.vocab_size, cfg.hidden_size, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                     embedding_init=sharded(normal(cfg.initializer_range), "vocab", "embed"), rngs=rngs)


def _layer(cfg: ModelConfig, rngs: nnx.Rngs, index: int) -> Block:
    return Block(cfg, rngs=rngs, index=index)


def _final_norm(cfg: ModelConfig, rngs: nnx.Rngs, index: int) -> RMSNorm:
    return RMSNorm(cfg.hidden_size, eps=cfg.norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype,
                   recompute=cfg.recompute_elementwise)


def _lm_head(cfg: ModelConfig, rngs: nnx.Rngs, index: int) -> nnx.Linear:
    return linear(cfg.hidden_size, cfg.vocab_size, ("embed", "vocab"), std=cfg.initializer_range, rngs=rngs,
                  dtype=cfg.compute_dtype, param_dtype=cfg.params_dtype)


class CausalLM(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, build=None):
        """The model of `config`, its parameters drawn from `rngs` piece by piece in a fixed order (embeddings,
        layers, final norm, head). `build(piece, index)`: how each piece is made, default `piece(config, rngs,
        index)` here; `init_split` passes one that runs each piece as a compiled program."""
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config: expected a ModelConfig (see ccq_jax.models.get_config), got {config!r}")
        self.config = config
        build = build or (lambda piece, index: piece(config, rngs, index))
        self.embeddings = build(_embeddings, 0)
        self.layers = nnx.List([build(_layer, i) for i in range(config.num_hidden_layers)])
        self.norm = build(_final_norm, 0)
        if not config.tie_word_embeddings:
            self.lm_head = build(_lm_head, 0)

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
        remat_policy = self.config.remat_policy
        if cache is not None:
            new_cache = []
            for layer, layer_cache in zip(self.layers, cache):
                x, layer_cache = layer(x, segment_ids, layer_cache)
                new_cache.append(layer_cache)
            return self.norm(x), tuple(new_cache)
        if self.config.scan_layers:
            for start, stop, period in scan_plan(layer_mixers(self.config)):
                blocks = [self.layers[i] for i in range(start, stop)]
                if len(blocks) == 1:
                    x = _block(blocks[0], x, segment_ids, remat_policy)[0]
                else:
                    x = _scanned_blocks(blocks, period, x, segment_ids, remat_policy)
            return self.norm(x), None
        for layer in self.layers:
            x = _block(layer, x, segment_ids, remat_policy)[0]
        return self.norm(x), None

    def head(self) -> jax.Array:
        """The LM head as a [D, vocab] matrix (the embedding table, transposed, with tied embeddings)."""
        return self.embeddings.embedding[...].T if self.config.tie_word_embeddings else self.lm_head.kernel[...]


def init_split(config: ModelConfig, seed: int = 0, shard=None) -> tuple:
    """`nnx.split(CausalLM(config, rngs=nnx.Rngs(seed)), nnx.Param, ...)` (graphdef, parameters, other variables):
    the same values, each piece (the embeddings, each layer, the final norm, the head) made by a compiled program
    of its own, compiled once per kind of piece: a model's layers share one program (a hybrid's attention layers
    another), where one program for the whole model repeats each layer's initialisers in it (on an H100, over 3
    minutes of compilation for gdn-1.3b's 21 layers). The random stream runs through the pieces in the model's order.
    `shard(abstract_state)`: the shardings to create a piece's variables in (e.g. by their logical axes on a mesh,
    `train.sharding.state_shardings`), applied to its parameters, its other variables and the random stream's
    state; None: the default device."""
    rngs = nnx.Rngs(seed)
    rng_graphdef = nnx.graphdef(rngs)
    kinds = (None,) * config.num_hidden_layers if isinstance(config, TransformerConfig) else layer_mixers(config)
    programs = {}

    def build(piece, index):
        kind = (piece, kinds[index] if piece is _layer else None)
        if kind not in programs:
            first = kinds.index(kind[1]) if piece is _layer else index  # layers of one kind are built alike

            def init_piece(rng_state):
                stream = nnx.merge(rng_graphdef, rng_state)
                _, params, others = nnx.split(piece(config, stream, first), nnx.Param, ...)
                return params, others, nnx.state(stream)

            graphdef = nnx.graphdef(nnx.eval_shape(lambda: piece(config, nnx.Rngs(seed), first)))
            shardings = None if shard is None else tuple(map(shard, jax.eval_shape(init_piece, nnx.state(rngs))))
            programs[kind] = graphdef, jax.jit(init_piece, out_shardings=shardings)
        graphdef, program = programs[kind]
        params, others, rng_state = program(nnx.state(rngs))
        nnx.update(rngs, rng_state)
        return nnx.merge(graphdef, params, others)

    return nnx.split(CausalLM(config, rngs=rngs, build=build), nnx.Param, ...)


def lm_logits(x: jax.Array, head: jax.Array, dtype, out_dtype=jnp.float32, *, impl="xla", interpret=None) -> jax.Array:
    """Logits of hidden states x [..., D] against `head` [D, vocab], the product in `dtype` (None: the promoted
    type of the two), as `nnx.Linear` and `nnx.Embed.attend` compute it; returned in `out_dtype` (None: the
    product's own). impl, interpret: `ccq_jax.ops.internals.head_logits`'s ("pallas": a decode step's few rows)."""
    if dtype is not None:
        x, head = x.astype(dtype), head.astype(dtype)
    logits = head_logits(x, head, impl=impl, interpret=interpret)
    return logits if out_dtype is None else logits.astype(out_dtype)
