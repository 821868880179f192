"""`cpu_paths()`: run fla's GLA, Gated DeltaNet and KDA models (and its GDN-2 layer) on a CPU, where its Triton
kernels cannot run.

Inside the context, every Triton call of these models' forward goes to a pure-PyTorch path:
the recurrences to fla's own references (`fla.ops.gla.naive.naive_recurrent_gla`,
`fla.ops.gated_delta_rule.naive.naive_recurrent_gated_delta_rule` with fla's `naive_gdn_gate`,
`fla.ops.kda.naive.naive_recurrent_kda` with fla's `naive_kda_gate` / `naive_kda_lowerbound_gate`,
`fla.ops.gdn2.naive.naive_recurrent_gdn2`),
the norms to fla's `rms_norm_ref` functions, the short convolutions to `torch.nn.Conv1d`'s
causal form, and the SwiGLU MLP to `silu(gate) * up`. A hybrid's attention layers (`fla.layers.attn.Attention`,
which needs flash-attn) get `flash_attn_func` on PyTorch's attention in fp32 (`ccq_jax.torch_reference.attention`),
and fla's rotary embedding its `rotary_embedding_ref`. fla's Mamba2 runs its own `torch_forward` on a CPU; its swish
goes to `F.silu` and its `RMSNormGated` to `rms_norm_ref`. Only whole sequences are supported (no cache, `cu_seqlens`
or `attention_mask`: NotImplementedError), which is what parity needs.
"""

import contextlib
from unittest import mock

import torch
import torch.nn.functional as F
from fla.layers import attn as fla_attn_layer
from fla.layers import gated_deltanet as fla_gdn_layer
from fla.layers import gdn2 as fla_gdn2_layer
from fla.layers import gla as fla_gla_layer
from fla.layers import kda as fla_kda_layer
from fla.modules import FusedRMSNormGated, GatedMLP, RMSNorm, ShortConvolution
from fla.modules.activations import ops as fla_activations
from fla.modules.norm import layernorm as fla_layernorm
from fla.modules.norm import layernorm_gated as fla_layernorm_gated
from fla.modules.rotary import ops as fla_rotary
from fla.ops.gated_delta_rule.gate import naive_gdn_gate
from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
from fla.ops.gdn2.naive import naive_recurrent_gdn2
from fla.ops.gla.naive import naive_recurrent_gla
from fla.ops.kda.gate import naive_kda_gate, naive_kda_lowerbound_gate
from fla.ops.kda.naive import naive_recurrent_kda

from ccq_jax.torch_reference.attention import flash_attn_func as torch_flash_attn
from ccq_jax.torch_reference.ccq import l2norm
from ccq_jax.torch_reference.models import GDN_KERNELS, GLA_KERNELS

KDA_KERNELS = ("chunk_kda", "fused_recurrent_kda")
GDN2_KERNELS = ("chunk_gdn2", "fused_recurrent_gdn2")


def _unsupported(what, **given):
    bad = [name for name, value in given.items() if value is not None and value is not False]
    if bad:
        raise NotImplementedError(f"{what} on CPU: {bad} not supported (run whole sequences without a cache)")


def _state_layout(state, state_v_first):
    return state.transpose(-1, -2) if state is not None and state_v_first else state


def naive_gla(*, q, k, v, g=None, gk=None, scale=None, initial_state=None, output_final_state=False,
              state_v_first=False, cu_seqlens=None, **_):
    """fla's GLA kernels' signature (`g` for chunk, `gk` for fused_recurrent) on `naive_recurrent_gla`."""
    _unsupported("gla", cu_seqlens=cu_seqlens)
    if scale is not None and scale != q.shape[-1] ** -0.5:
        raise NotImplementedError(f"gla on CPU: only the default scale K**-0.5, got {scale}")
    o, state = naive_recurrent_gla(q, k, v, gk if gk is not None else g,
                                   initial_state=_state_layout(initial_state, state_v_first),
                                   output_final_state=output_final_state)
    return o, _state_layout(state, state_v_first)


def naive_gdn(*, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False,
              use_gate_in_kernel=False, A_log=None, dt_bias=None, state_v_first=False, cu_seqlens=None, **_):
    """fla's gated-delta-rule kernels' signature on `naive_recurrent_gated_delta_rule`."""
    _unsupported("gated_delta_rule", cu_seqlens=cu_seqlens)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    if use_gate_in_kernel:
        g = naive_gdn_gate(g, A_log, dt_bias)
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    groups = v.shape[2] // q.shape[2]
    q, k = (x.repeat_interleave(groups, dim=2) for x in (q, k))
    o, state = naive_recurrent_gated_delta_rule(q, k, v, beta, g, scale=scale,
                                                initial_state=_state_layout(initial_state, state_v_first),
                                                output_final_state=output_final_state)
    return o.to(v.dtype), _state_layout(state, state_v_first)


def naive_kda(*, q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, lower_bound=None, A_log=None, dt_bias=None, state_v_first=False,
              cu_seqlens=None, **_):
    """fla's KDA kernels' signature (`chunk_kda`, `fused_recurrent_kda`) on `naive_recurrent_kda` (GVA inside)."""
    _unsupported("kda", cu_seqlens=cu_seqlens)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    if use_gate_in_kernel:
        g = (naive_kda_gate(g, A_log, dt_bias) if lower_bound is None
             else naive_kda_lowerbound_gate(g, A_log, dt_bias, lower_bound))
    if use_beta_sigmoid_in_kernel:
        beta = beta.float().sigmoid() * (2.0 if allow_neg_eigval else 1.0)
    o, state = naive_recurrent_kda(q, k, v, g, beta, scale=scale,
                                   initial_state=_state_layout(initial_state, state_v_first),
                                   output_final_state=output_final_state)
    return o.to(v.dtype), _state_layout(state, state_v_first)


def naive_gdn2(*, q, k, v, g, b, w, scale=None, initial_state=None, output_final_state=False,
               use_qk_l2norm_in_kernel=False, cu_seqlens=None, **_):
    """fla's GDN-2 kernels' signature (`chunk_gdn2`, `fused_recurrent_gdn2`) on `naive_recurrent_gdn2`."""
    _unsupported("gdn2", cu_seqlens=cu_seqlens)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    return naive_recurrent_gdn2(q, k, v, g, b, w, scale=scale, initial_state=initial_state,
                                output_final_state=output_final_state)


def flash_attn_func(q, k, v, **kwargs):
    """flash-attn's `flash_attn_func` (`ccq_jax.torch_reference.attention`) in fp32, cast back to v's dtype."""
    return torch_flash_attn(q.float(), k.float(), v.float(), **kwargs).to(v.dtype)


def rotary_embedding(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, **_):
    """fla's `rotary_embedding` on its `rotary_embedding_ref`, positions 0..T-1 (whole sequences)."""
    _unsupported("rotary_embedding", cu_seqlens=cu_seqlens, seqlen_offsets=seqlen_offsets or None)
    t = x.shape[1]
    return fla_rotary.rotary_embedding_ref(x, cos[:t], sin[:t], interleaved=interleaved)


def _rms_norm(self, x, residual=None, prenorm=False, residual_in_fp32=False):
    out = fla_layernorm.rms_norm_ref(x, self.weight, self.bias, residual=residual, eps=self.eps, prenorm=prenorm,
                                     upcast=True)
    if not prenorm:
        return out
    out, summed = out
    return out.to(x.dtype), summed.to(torch.float32 if residual_in_fp32 else x.dtype)


def _rms_norm_gated(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
    _unsupported("FusedRMSNormGated", residual=residual, prenorm=prenorm)
    if self.activation == "sigmoid":
        y = fla_layernorm_gated.rms_norm_ref(x, self.weight, self.bias, eps=self.eps).float()
        return (y * g.float().sigmoid()).to(x.dtype)
    return fla_layernorm_gated.rms_norm_ref(x, self.weight, self.bias, z=g, eps=self.eps, norm_before_gate=True)


def _rms_norm_gated_silu(self, x, z=None):
    return fla_layernorm_gated.rms_norm_ref(x, self.weight, self.bias, z=z, eps=self.eps, group_size=self.group_size,
                                            norm_before_gate=self.norm_before_gate).to(x.dtype)


def swish_fwd(x, output_contiguous=False):
    return F.silu(x)


def causal_conv1d(x, weight, bias=None, residual=None, initial_state=None, output_final_state=False,
                  activation=None, cu_seqlens=None, **_):
    """fla's `causal_conv1d` (x [B, T, D], weight [D, W]) as a depthwise torch convolution."""
    _unsupported("causal_conv1d", residual=residual, initial_state=initial_state,
                 output_final_state=output_final_state, cu_seqlens=cu_seqlens)
    d, w = weight.shape
    y = F.conv1d(x.transpose(1, 2), weight[:, None, :], bias, padding=w - 1, groups=d)[..., :x.shape[1]]
    y = y.transpose(1, 2)
    return (F.silu(y) if activation in ("silu", "swish") else y), None


def _short_conv(self, x, residual=None, mask=None, cache=None, output_final_state=False, cu_seqlens=None, **_):
    _unsupported("ShortConvolution", mask=mask, cache=cache)
    return causal_conv1d(x, self.weight[:, 0, :], self.bias, residual=residual, activation=self.activation,
                         output_final_state=output_final_state, cu_seqlens=cu_seqlens)


def _gated_mlp(self, x, **_):
    if self.hidden_act != "swish":
        raise NotImplementedError(f"GatedMLP on CPU: hidden_act {self.hidden_act!r} (only 'swish')")
    return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@contextlib.contextmanager
def cpu_paths():
    """Within the context fla's GLA / Gated DeltaNet / KDA models (hybrids included: fla's Attention can also be
    built, flash-attn or not), its GDN-2 layer (and the CCQ reference) run in pure PyTorch."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.multiple(fla_gla_layer, **dict.fromkeys(GLA_KERNELS, naive_gla)))
        stack.enter_context(mock.patch.multiple(fla_gdn_layer, causal_conv1d=causal_conv1d,
                                                **dict.fromkeys(GDN_KERNELS, naive_gdn)))
        stack.enter_context(mock.patch.multiple(fla_kda_layer, **dict.fromkeys(KDA_KERNELS, naive_kda)))
        stack.enter_context(mock.patch.multiple(fla_gdn2_layer, **dict.fromkeys(GDN2_KERNELS, naive_gdn2)))
        stack.enter_context(mock.patch.object(fla_attn_layer, "flash_attn_func", flash_attn_func))
        stack.enter_context(mock.patch.object(fla_rotary, "rotary_embedding", rotary_embedding))
        stack.enter_context(mock.patch.object(fla_activations, "swish_fwd", swish_fwd))
        for cls, forward in ((RMSNorm, _rms_norm), (FusedRMSNormGated, _rms_norm_gated),
                             (ShortConvolution, _short_conv), (GatedMLP, _gated_mlp),
                             (fla_layernorm_gated.RMSNormGated, _rms_norm_gated_silu)):
            stack.enter_context(mock.patch.object(cls, "forward", forward))
        yield
