"""flash-attn's `flash_attn_func` on PyTorch's `scaled_dot_product_attention`, for fla's hybrid attention layers where
the flash-attn package is not installed.

fla's `Attention` (`fla.layers.attn`, the attention layers of its hybrid models) calls flash-attn's
`flash_attn_func(q, k, v, causal=True, window_size=(W - 1, 0) or (-1, -1))` and refuses to build without the
package. flash-attn has no CPU build, and no wheel for the GPU machine's torch 2.11 / CUDA 13 that can be carried
there. `flash_attn_func` below keeps flash-attn's meaning: q [B, Tq, H, D], k / v [B, Tk, Hkv, D] with H a multiple
of Hkv (grouped-query heads), the queries aligned with the last Tq keys (query i sees key j where
i + Tk - Tq - window_size[0] <= j <= i + Tk - Tq: a one-token decode step sees the whole cache), scale D**-0.5 unless
given. Whole causal attention goes to PyTorch's fused kernels (`is_causal`, or nothing to mask for a single query);
a window or a block of queries shorter than the keys passes a boolean mask.

`flash_attn_on_torch(backends)` installs it in fla's attention layer for a `with` block. On a GPU pass the fused
backends (`FUSED_BACKENDS`): PyTorch then raises where none of them can run a call, instead of falling back to its
unfused math path, so an anchor timed through it is never silently slowed down. `fla_attention(config)` says how an
fla model's attention layers will run on this machine and gives the context to build and run the model in.
"""

import contextlib
import importlib.util
from unittest import mock

import torch
import torch.nn.functional as F
from fla.layers import attn as fla_attn_layer
from torch.nn.attention import SDPBackend, sdpa_kernel

FUSED_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION)


def _visibility(tq: int, tk: int, window: int, device) -> tuple[torch.Tensor | None, bool]:
    """(attn_mask, is_causal) for the last tq of tk positions reading with a left window (< 0: none): PyTorch's own
    causal form where it says it all, no mask for one query without a window, else True where query i may read
    key j."""
    if window < 0 and tq == tk:
        return None, True
    if window < 0 and tq == 1:
        return None, False
    gap = torch.arange(tk - tq, tk, device=device)[:, None] - torch.arange(tk, device=device)[None, :]
    return ((gap >= 0) if window < 0 else (gap >= 0) & (gap <= window)), False


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash-attn's `flash_attn_func` (causal; optionally a left window) on `F.scaled_dot_product_attention`.
    `deterministic` (flash-attn's choice of backward algorithm) has no counterpart there and changes nothing."""
    unsupported = {"causal=False": not causal, "dropout_p": dropout_p, "softcap": softcap,
                   "alibi_slopes": alibi_slopes is not None, "return_attn_probs": return_attn_probs,
                   "window_size[1] > 0": window_size[1] > 0}
    bad = [name for name, given in unsupported.items() if given]
    if bad:
        raise NotImplementedError(f"flash_attn_func on PyTorch: {bad} not supported (fla's Attention needs none)")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"k: expected a number of heads dividing q's {q.shape[2]}, got {k.shape[2]}")
    tq, tk = q.shape[1], k.shape[1]
    if tq > tk:
        raise ValueError(f"q: expected at most as many positions as k ({tk}), got {tq}")
    mask, is_causal = _visibility(tq, tk, window_size[0], q.device)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                         is_causal=is_causal, scale=softmax_scale, enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


@contextlib.contextmanager
def flash_attn_on_torch(backends=None):
    """fla's `Attention` runs `flash_attn_func` above inside the block (built there too: fla checks at build time);
    `backends` (e.g. `FUSED_BACKENDS`) limits PyTorch to those kernels, None leaves its choice."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(fla_attn_layer, "flash_attn_func", flash_attn_func))
        if backends is not None:
            stack.enter_context(sdpa_kernel(list(backends)))
        yield


def fla_attention(config: dict):
    """(how, context) for an fla config dict: ("none", a null context) without attention layers, ("flash-attn", a
    null context) where flash-attn is installed, else ("torch sdpa, fused backends", `flash_attn_on_torch` limited
    to `FUSED_BACKENDS`)."""
    if not config.get("attn"):
        return "none", contextlib.nullcontext()
    if importlib.util.find_spec("flash_attn") is not None:
        return "flash-attn", contextlib.nullcontext()
    return "torch sdpa, fused backends", flash_attn_on_torch(FUSED_BACKENDS)
