"""CCQ-GLA and CCQ-Gated DeltaNet in PyTorch: fla's models with the CCQ read added in front of their kernels.

`CCQGLAForCausalLM` (model_type `ccq_gla`) and `CCQGatedDeltaNetForCausalLM` (model_type
`ccq_gated_deltanet`) are fla's `GLAForCausalLM` / `GatedDeltaNetForCausalLM`, built by fla's
own code with one change: each layer also holds a `CCQGate` at `attn.ccq` (parameters
`model.layers.{i}.attn.ccq.weight [H, K]` and `.bias [H]`), and while the layer runs, fla's
kernel functions are wrapped so that the query reaching the kernel is the cleaned one
(`torch_reference.ccq.ccq_query`, a plain PyTorch recurrence). Everything else (projections,
short convolutions, gates, norms, MLPs) is fla's code. The config is fla's plus a `ccq` dict
(`mode`, `fixed_lambda`, `centered`, `normalize_keys`, `gate_bias_init`), the checkpoint layout
`ccq_jax.convert.save_fla_checkpoint` writes.

GLA: the gate reads q as the kernel gets it ([B, T, H, K], keys repeated over groups of heads).
Gated DeltaNet: q and k are l2-normalised here (fla normalises inside its kernel; the cleaned
query must not be normalised again) and repeated to the value heads when num_v_heads > num_heads,
so lambda, the statistics and the cleaned query are per value head, as in `ccq_jax.layers`.

The reference runs whole sequences: incremental decoding (a cache with CCQ statistics) and
packed / padded inputs (`cu_seqlens`, `attention_mask`) raise NotImplementedError.
"""

import functools
from unittest import mock

from fla.layers import gated_deltanet as fla_gdn_layer
from fla.layers import gla as fla_gla_layer
from fla.models import GatedDeltaNetConfig, GatedDeltaNetForCausalLM, GLAConfig, GLAForCausalLM
from fla.models.gated_deltanet import modeling_gated_deltanet
from fla.models.gla import modeling_gla
from transformers import AutoConfig, AutoModelForCausalLM

from ccq_jax.torch_reference.ccq import CCQGate, check_ccq_config, l2norm

GLA_KERNELS = ("chunk_gla", "fused_chunk_gla", "fused_recurrent_gla")
GDN_KERNELS = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule")


def _whole_sequences_only(kw):
    if kw.get("initial_state") is not None or kw.get("cu_seqlens") is not None:
        raise NotImplementedError("the CCQ reference runs whole unpadded sequences: no cache (its statistics "
                                  "are not cached), no attention_mask / cu_seqlens")


def _gla_read(kernel, gate, *, q, k, **kw):
    _whole_sequences_only(kw)
    return kernel(q=gate.clean(q, k), k=k, **kw)


def _gdn_read(kernel, gate, *, q, k, v, **kw):
    _whole_sequences_only(kw)
    if kw.pop("use_qk_l2norm_in_kernel", False):
        q, k = l2norm(q).to(q.dtype), l2norm(k).to(k.dtype)
    groups = v.shape[2] // q.shape[2]
    q, k = (x.repeat_interleave(groups, dim=2) for x in (q, k))
    return kernel(q=gate.clean(q, k), k=k, v=v, use_qk_l2norm_in_kernel=False, **kw)


class _CCQLayer:
    """Mixin for an fla layer: a `CCQGate` at `ccq` (heads: the attribute `_gate_heads`), and while the
    layer runs, the kernel functions `_kernels` of its module `_fla_module` wrapped by `_read`."""

    def __init__(self, *, ccq: dict, **kwargs):
        super().__init__(**kwargs)
        self.ccq = CCQGate(getattr(self, self._gate_heads), self.head_k_dim, ccq)

    def forward(self, hidden_states, **kwargs):
        module = self._fla_module
        wrapped = {name: functools.partial(self._read, getattr(module, name), self.ccq) for name in self._kernels}
        with mock.patch.multiple(module, **wrapped):
            return super().forward(hidden_states, **kwargs)


class CCQGatedLinearAttention(_CCQLayer, fla_gla_layer.GatedLinearAttention):
    _fla_module, _kernels, _read, _gate_heads = fla_gla_layer, GLA_KERNELS, staticmethod(_gla_read), "num_heads"


class CCQGatedDeltaNet(_CCQLayer, fla_gdn_layer.GatedDeltaNet):
    _fla_module, _kernels, _read, _gate_heads = fla_gdn_layer, GDN_KERNELS, staticmethod(_gdn_read), "num_v_heads"


class CCQGLAConfig(GLAConfig):
    model_type = "ccq_gla"

    def __init__(self, ccq: dict | None = None, **kwargs):
        self.ccq = ccq
        super().__init__(**kwargs)


class CCQGatedDeltaNetConfig(GatedDeltaNetConfig):
    model_type = "ccq_gated_deltanet"

    def __init__(self, ccq: dict | None = None, **kwargs):
        self.ccq = ccq
        super().__init__(**kwargs)


def _build_with_ccq_layers(model, config, fla_cls, modeling_module, layer_name, layer_cls):
    """Run fla's model constructor `fla_cls.__init__` with its layer class replaced by the CCQ subclass."""
    ccq = check_ccq_config(config.ccq)
    with mock.patch.object(modeling_module, layer_name, functools.partial(layer_cls, ccq=ccq)):
        fla_cls.__init__(model, config)


class CCQGLAForCausalLM(GLAForCausalLM):
    config_class = CCQGLAConfig

    def __init__(self, config: CCQGLAConfig):
        _build_with_ccq_layers(self, config, GLAForCausalLM, modeling_gla, "GatedLinearAttention",
                               CCQGatedLinearAttention)


class CCQGatedDeltaNetForCausalLM(GatedDeltaNetForCausalLM):
    config_class = CCQGatedDeltaNetConfig

    def __init__(self, config: CCQGatedDeltaNetConfig):
        _build_with_ccq_layers(self, config, GatedDeltaNetForCausalLM, modeling_gated_deltanet, "GatedDeltaNet",
                               CCQGatedDeltaNet)


def register() -> None:
    """Make `AutoConfig` / `AutoModelForCausalLM` know the two CCQ model types (idempotent)."""
    for config_cls, model_cls in ((CCQGLAConfig, CCQGLAForCausalLM),
                                  (CCQGatedDeltaNetConfig, CCQGatedDeltaNetForCausalLM)):
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        AutoModelForCausalLM.register(config_cls, model_cls, exist_ok=True)

