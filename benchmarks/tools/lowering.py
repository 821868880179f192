"""The GPU kernels an op compiles to, lowered from any host (no GPU needed): each Triton kernel's name, IR text,
warps and stages, and the number of Mosaic GPU kernels, for the op's forward and backward.

    triton, n_mosaic = lowered_kernels("gated_delta_rule", "bfloat16")

`benchmarks/kernel_resources.py` compiles the captured IR with ptxas for shared memory, registers and spills;
the tests count the kernels and check they lower. The capture hooks JAX's Triton lowering (internal modules of
jax 0.11.2) for the duration of the call only.
"""

import jax
import jax.numpy as jnp
from jax._src.interpreters import mlir
from jax._src.lib.mlir import ir
from jax._src.pallas.triton import gpu_info, lowering, pallas_call_registration

import ccq_jax.ops as ops
from ccq_jax.ops.internals import head_logits


def lowered_kernels(op, dtype, impl="pallas", tokens=128, heads=(2, 256, 512)):
    """([(kernel name, Triton IR text, num_warps, num_stages)], the number of Mosaic GPU kernels) of `op`'s forward
    and backward for impl (compiled for a GPU: interpret=False) at `tokens` tokens (1: a decode step, on the one-token
    kernels), the Triton ones in lowering order (this tool measures those; the Mosaic GPU ones are counted).
    op "lm_head": the row-matmul kernel of the LM head (`ccq_jax.ops.internals.head_logits`) at `tokens` rows of
    gla-1.3b's head (impl unused). heads: (H, K, V) of the op's inputs (default: the 1.3B GLA / GDN head widths;
    fla's KDA-1.3B is (16, 128, 128))."""
    info = gpu_info.GpuInfo(gpu_version=None, arch_name="9.0", compute_capability=90)
    modules, kernels, mosaic = [], [], []
    lower, custom_call = lowering.lower_jaxpr_to_triton_module, mlir.custom_call
    get_info = pallas_call_registration.gpu_info_lib.get_gpu_info

    def capture_module(*args, **kwargs):
        result = lower(*args, **kwargs)
        modules.append(result.module.operation.get_asm(enable_debug_info=False))
        return result

    def capture_call(*args, **kwargs):
        if kwargs.get("call_target_name") == "__gpu$xla.gpu.triton":
            value = lambda key, kind: kind(kwargs["backend_config"][key]).value
            kernels.append((value("name", ir.StringAttr), modules.pop(), value("num_warps", ir.IntegerAttr),
                            value("num_stages", ir.IntegerAttr)))
        elif kwargs.get("call_target_name", "").startswith("mosaic_gpu"):
            mosaic.append(kwargs["call_target_name"])
        return custom_call(*args, **kwargs)

    lowering.lower_jaxpr_to_triton_module, mlir.custom_call = capture_module, capture_call
    pallas_call_registration.gpu_info_lib.get_gpu_info = lambda: info
    try:
        spec = lambda *shape, d=dtype: jax.ShapeDtypeStruct(shape, d)
        if op == "lm_head":  # the forward only (its backward is XLA's GEMMs), `tokens` rows of gla-1.3b's head
            traced = jax.jit(lambda x, w: head_logits(x, w, impl="pallas", interpret=False))
            inputs = (spec(tokens, 2048), spec(2048, 32000))
        else:
            (H, K, V), B, T = heads, 1, tokens
            f32 = jnp.float32
            args = {"q": spec(B, T, H, K), "k": spec(B, T, H, K), "v": spec(B, T, H, V),
                    "g": spec(B, T, H, K, d=f32), "g_head": spec(B, T, H, d=f32), "beta": spec(B, T, H, d=f32),
                    "lam": spec(B, T, H, d=f32), "a": spec(B, T, H, K)}
            names = {"gla": ["q", "k", "v", "g"], "gated_delta_rule": ["q", "k", "v", "g_head", "beta"],
                     "ccq_query": ["q", "k", "lam"], "ccq_gla": ["q", "k", "v", "g", "lam"],
                     "ccq_gated_delta_rule": ["q", "k", "v", "g_head", "beta", "lam"],
                     "generalized_delta_rule": ["q", "k", "v", "g", "a"],
                     "ccq_generalized_delta_rule": ["q", "k", "v", "g", "a", "lam"]}[op]
            loss = lambda *x: jnp.sum(jnp.square(getattr(ops, op)(*x, impl=impl, interpret=False)[0].astype(f32)))
            traced = jax.jit(jax.grad(loss, argnums=tuple(range(len(names)))))
            inputs = tuple(args[n] for n in names)
        traced.trace(*inputs).lower(lowering_platforms=("cuda",))
    finally:
        lowering.lower_jaxpr_to_triton_module, mlir.custom_call = lower, custom_call
        pallas_call_registration.gpu_info_lib.get_gpu_info = get_info
    return kernels, len(mosaic)
