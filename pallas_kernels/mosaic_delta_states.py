"""The gated delta rule's forward state pass (`delta_rule.delta_states`) and the backward's plain state pass from
v_new (`linear_attention.chunk_states` with per-head factors) in Mosaic GPU, Pallas's warpgroup/TMA backend for
Hopper. On the H200 (B = 4, T = 4096, H = 6, K = 256, V = 512, bf16) they take 0.237 and 0.188 ms against
0.407 and 0.241 for their Triton-lowered twins, with the same results (docs/benchmarks.md, "Backend").

One block holds two compute warpgroups and one memory warpgroup. The memory warpgroup streams each chunk's k (and
w) tile `[C, K]` (TMA, two chunks in flight) and its `write` factors into shared memory; both compute warpgroups
read them, each for its own 64 columns of V, so the tiles cross from memory once for 128 columns (the Triton
kernels run one program per 64). Each compute warpgroup fetches its values' `[C, 64]` tile a chunk ahead (two
slots) and keeps its `[K, 64]` slab of the state in fp32 registers (two `[K/2, 64]` halves, the shape its fp32
staging buffer for h0 and the final state holds). Per chunk it stores the state in the inputs' dtype to shared
memory, whence a TMA store writes it out and the tensor cores read it for the correction v_new = u - w S
(wgmma; v_new leaves from the values' slot); then S <- decay S + k^T (v_new write) (wgmma, k read transposed
from shared memory, v_new write where the state was). Without w the values go in as they are (the backward's
recompute from the v_new the forward kept). The delta rule's form asks for 229,888 bytes of shared memory (w and
k: 128 KB in two slots; per warpgroup the state's 32 KB and the values' 16 KB) of the H200's 232,448.

Half-precision inputs only (the tensor cores' operands), K a multiple of 128, V of 128, 64-token chunks:
`supports` says whether a call qualifies; the callers run the Triton kernels otherwise and in interpret mode
(Mosaic GPU's interpreter does not run wgmma inside the warp-specialized pipeline in jax 0.11.2: "Cannot lower
jaxpr with effects" on its WGMMA pipeline effect), so CI checks that these lower (tests/pallas/test_mosaic.py)
and the GPU tests check their numbers.
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

f32 = jnp.float32
_SLAB = 64  # V columns per compute warpgroup
_WARPGROUPS = 2  # compute warpgroups per block
_COLUMNS = _SLAB * _WARPGROUPS  # V columns per block


def supports(k, values, chunk, store):
    """Whether the Mosaic GPU state passes take these inputs (k `[B, Tp, H, K]`, values `[B, Tp, H, V]`)."""
    dtype = k.dtype
    return (dtype in (jnp.bfloat16, jnp.float16) and values.dtype == dtype and jnp.dtype(store) == dtype
            and k.shape[-1] % 128 == 0 and values.shape[-1] % _COLUMNS == 0 and chunk == 64)


def _swizzled(dtype):
    """Shared-memory transforms for [rows, 128 bytes] tiles: 8-row tiles, 128-byte swizzle (wgmma's)."""
    return plgpu.TilingTransform((8, 128 // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(128)


def state_pass(w, values, k, write, decay, h0, *, chunk, store):
    """S <- decay S + k^T (v write) chunk by chunk, with v = values - w S (w given: `delta_rule.delta_states`,
    values being u) or v = values (w None). write `[B, Tp, H]`, decay `[B, N, H]`, h0 `[B, H, K, V]` fp32.
    Returns (the state entering each chunk `[B, N, H, K, V]` in `store`, v_new in the values' dtype when w is
    given, the final state fp32)."""
    if not supports(k, values, chunk, store):
        raise ValueError(f"the Mosaic GPU state pass takes bf16/fp16 inputs stored in their dtype, K and V multiples "
                         f"of 128 and 64-token chunks; got {k.dtype} stored in {store}, K={k.shape[-1]}, "
                         f"V={values.shape[-1]}, chunk={chunk}")
    b_, tp, heads, dk = k.shape
    dv = values.shape[-1]
    dtype = k.dtype
    correct = w is not None
    n_chunks = tp // chunk
    rows_of = lambda n: pl.ds(n * chunk, chunk)
    half = dk // 2
    halves = (pl.ds(0, half), pl.ds(half, half))
    tiles = _swizzled(dtype)

    def kernel(*refs):
        w_g, refs = (refs[0], refs[1:]) if correct else (None, refs)
        u_g, k_g, f_g, d_g, h0_g, hs_g, *refs = refs
        vn_g, refs = (refs[0], refs[1:]) if correct else (None, refs)
        ht_g, (s_smem, stage_smem), u_smem, u_ready, h_ready = refs
        wg = lax.axis_index("wg")
        bh = lax.axis_index("bh")
        b, h = lax.div(bh, heads), lax.rem(bh, heads)
        cols = pl.ds(lax.axis_index("v") * _COLUMNS + wg * _SLAB, _SLAB)
        s_ref, stage = s_smem.at[wg], stage_smem.at[wg]

        def fetch_values(n):  # into one of the warpgroup's two slots, a chunk ahead
            slot = lax.rem(n, 2)
            plgpu.copy_gmem_to_smem(u_g.at[b, rows_of(n), h, cols], u_smem.at[wg, slot], u_ready.at[2 * wg + slot])

        def step(indices, *refs):
            (n,) = indices
            *w_ref, k_ref, f_ref, S = refs
            slot = lax.rem(n, 2)
            u_ref = u_smem.at[wg, slot]
            decay = d_g[b, h, n]  # a load from memory: issued first
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last chunk's state and v_new have left

            @pl.when(n + 1 < n_chunks)
            def _():
                fetch_values(n + 1)

            for rows, S_half in zip(halves, S):
                s_ref[rows, :] = S_half.astype(dtype)
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(s_ref, hs_g.at[b, n, h, :, cols])
            if correct:
                def correction(acc):
                    plgpu.wgmma(acc, w_ref[0], s_ref)
                    return acc[...]

                w_s = pl.run_scoped(correction, plgpu.ACC((chunk, _SLAB), f32))
            plgpu.barrier_wait(u_ready.at[2 * wg + slot])
            v = u_ref[...].astype(f32)
            if correct:  # v_new leaves from the values' slot; v_new write goes where the state was
                v = v - w_s
                u_ref[...] = v.astype(dtype)
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(u_ref, vn_g.at[b, rows_of(n), h, cols])
                plgpu.wait_smem_to_gmem(1, wait_read_only=True)  # the state has left s_ref
                end_ref = s_ref.at[pl.ds(0, chunk)]
            else:
                end_ref = u_ref
            f = plgpu.load(f_ref, layout=plgpu.Layout.WGMMA.reduce(1))
            end_ref[...] = (v * lax.broadcast_in_dim(f, v.shape, [0])).astype(dtype)
            plgpu.commit_smem()

            def update(accs):  # both halves' products issued before one wait
                for rows, acc in zip(halves, accs):
                    plgpu.wgmma(acc, k_ref.at[:, rows].T, end_ref)

            return pl.run_state(update)(tuple(plgpu.ACC.init(S_half * decay) for S_half in S))

        def compute(pipeline):
            fetch_values(0)
            S = []
            for rows in halves:
                plgpu.copy_gmem_to_smem(h0_g.at[b, h, rows, cols], stage, h_ready.at[wg])
                plgpu.barrier_wait(h_ready.at[wg])
                S.append(stage[...])
            S = pipeline(tuple(S))
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            for rows, S_half in zip(halves, S):
                stage[...] = S_half
                plgpu.commit_smem()
                plgpu.copy_smem_to_gmem(stage, ht_g.at[b, h, rows, cols])
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)
            plgpu.wait_smem_to_gmem(0)

        tile_spec = plgpu.BlockSpec((chunk, dk), lambda n: (n, 0), transforms=tiles)
        pipeline = plgpu.emit_pipeline_warp_specialized(
            step, grid=(n_chunks,), memory_registers=40, wg_axis="wg", num_compute_wgs=_WARPGROUPS,
            max_concurrent_steps=2, compute_context=compute,
            in_specs=[tile_spec] * (1 + correct) + [plgpu.BlockSpec((chunk,), lambda n: (n,))])
        pipeline(*([w_g.at[b, :, h, :]] if correct else []), k_g.at[b, :, h, :], f_g.at[b, h, :])

    outs = (jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store),
            *([jax.ShapeDtypeStruct(values.shape, dtype)] if correct else []),
            jax.ShapeDtypeStruct((b_, heads, dk, dv), f32))
    slab = lambda dt, *rows: plgpu.SMEM((_WARPGROUPS, *rows, _SLAB), dt, transforms=_swizzled(dt))
    scratch = (plgpu.RefUnion(slab(dtype, dk), slab(f32, half)), slab(dtype, 2, chunk),
               plgpu.Barrier(num_barriers=2 * _WARPGROUPS), plgpu.Barrier(num_barriers=_WARPGROUPS))
    run = plgpu.kernel(kernel, out_type=outs, scratch_types=scratch, grid=(dv // _COLUMNS, b_ * heads),
                       grid_names=("v", "bh"), num_threads=_WARPGROUPS + 1, thread_name="wg",
                       kernel_name="delta_states_mosaic" if correct else "chunk_states_mosaic")
    # each chunk's factors contiguous for TMA: write as [B, H, Tp], decay as [B, H, N]
    results = run(*([w] if correct else []), values, k, jnp.transpose(write, (0, 2, 1)),
                  jnp.transpose(decay, (0, 2, 1)), h0)
    return results if correct else (results[0], None, results[1])
