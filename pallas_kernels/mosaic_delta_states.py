"""The gated delta rule's three state passes in Mosaic GPU, Pallas's warpgroup/TMA backend for Hopper: the
forward's (`delta_rule.delta_states`), the backward's recompute of the states from v_new (`linear_attention.
chunk_states` with per-head factors; both `state_pass`) and the state gradient's (`delta_rule.delta_dstates`:
`state_gradient_pass`). On the H200 (B = 4, T = 4096, H = 6, K = 256, V = 512, bf16) they take 0.23, 0.19
and 0.30 ms against 0.41, 0.24 and 0.82 for their Triton-lowered twins (docs/benchmarks.md, "Backend").

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

The state gradient's pass is laid out the same way with a hand-written memory warpgroup instead of the
pipeline (its docstring says why). Half-precision inputs only (the tensor cores' operands), K a multiple of
128, V of 128, 64-token chunks: `supports` says whether a call qualifies; the callers run the Triton kernels
otherwise and in interpret mode (Mosaic GPU's interpreter stops at these kernels' wgmma in jax 0.11.2,
"Cannot lower jaxpr with effects" on its WGMMA pipeline effect, both with and without the pipeline), so CI
checks that these lower (tests/pallas/test_mosaic.py) and the GPU tests check their numbers.
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


def _require(ok, what, k, values, chunk, store):
    """The ValueError for a call `supports` (and the pass) does not take."""
    if not ok:
        raise ValueError(f"the Mosaic GPU {what} takes bf16/fp16 inputs of one dtype stored in it, K and V multiples "
                         f"of 128 and 64-token chunks; got {k.dtype} stored in {store}, K={k.shape[-1]}, "
                         f"V={values.shape[-1]}, chunk={chunk}")


def _swizzled(dtype):
    """Shared-memory transforms for [rows, 128 bytes] tiles: 8-row tiles, 128-byte swizzle (wgmma's)."""
    return plgpu.TilingTransform((8, 128 // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(128)


def _per_warpgroup(dtype, *rows):
    """Shared memory holding a `[*rows, 64]` tile for each compute warpgroup, laid out for wgmma."""
    return plgpu.SMEM((_WARPGROUPS, *rows, _SLAB), dtype, transforms=_swizzled(dtype))


def _state_buffers(dtype, dk):
    """Each compute warpgroup's `[K, 64]` state slab in the inputs' dtype (the products' operand, the TMA stores'
    source), its bytes shared with the fp32 staging buffer of half a slab (`_load_slab`, `_save_slab`)."""
    return plgpu.RefUnion(_per_warpgroup(dtype, dk), _per_warpgroup(f32, dk // 2))


def _by_head(x):
    """Per-token or per-chunk factors `[B, T, H]` as `[B, H, T]`: each chunk's contiguous for TMA."""
    return jnp.transpose(x, (0, 2, 1))


def _launch(kernel, outs, scratch, *, dv, batch_heads, name):
    """A kernel of blocks of two compute warpgroups and one memory warpgroup, one block per 128 V columns of a
    (batch, head) pair."""
    return plgpu.kernel(kernel, out_type=outs, scratch_types=scratch, grid=(dv // _COLUMNS, batch_heads),
                        grid_names=("v", "bh"), num_threads=_WARPGROUPS + 1, thread_name="wg", kernel_name=name)


def _place(heads):
    """(this warpgroup's index, the block's batch row and head) inside a `_launch` kernel."""
    wg, bh = lax.axis_index("wg"), lax.axis_index("bh")
    heads = jnp.asarray(heads, bh.dtype)  # a Python int would be int64 under jax_enable_x64
    return wg, lax.div(bh, heads), lax.rem(bh, heads)


def _slot(n):
    """Which of two buffers chunk n uses: n mod 2 in int32 (a Python int 2 would be int64 under jax_enable_x64)."""
    return lax.rem(jnp.asarray(n, jnp.int32), jnp.int32(2))


def _columns(wg):
    """The 64 V columns of compute warpgroup `wg` in this block."""
    return pl.ds(lax.axis_index("v") * _COLUMNS + wg * _SLAB, _SLAB)


def _halves(dk):
    """The two row ranges of a `[K, 64]` state slab that a compute warpgroup holds as separate fp32 arrays."""
    return pl.ds(0, dk // 2), pl.ds(dk // 2, dk // 2)


def _load_slab(src, stage, ready):
    """An fp32 `[K, 64]` slab of memory (`src`) into registers, a half at a time through the staging buffer."""
    slab = []
    for rows in _halves(src.shape[0]):
        plgpu.copy_gmem_to_smem(src.at[rows], stage, ready)
        plgpu.barrier_wait(ready)
        slab.append(stage[...])
    return tuple(slab)


def _save_slab(slab, stage, dst):
    """The fp32 slab's halves to memory (`dst`) through the staging buffer; returns once they have left."""
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    for rows, part in zip(_halves(dst.shape[0]), slab):
        stage[...] = part
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(stage, dst.at[rows])
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    plgpu.wait_smem_to_gmem(0)


def _send_slab(slab, s_ref, dst):
    """The slab in s_ref's dtype into s_ref (the products' operand) and on to memory (`dst`, a TMA store)."""
    for rows, part in zip(_halves(s_ref.shape[0]), slab):
        s_ref[rows, :] = part.astype(s_ref.dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(s_ref, dst)


def state_pass(w, values, k, write, decay, h0, *, chunk, store):
    """S <- decay S + k^T (v write) chunk by chunk, with v = values - w S (w given: `delta_rule.delta_states`,
    values being u) or v = values (w None). write `[B, Tp, H]`, decay `[B, N, H]`, h0 `[B, H, K, V]` fp32.
    Returns (the state entering each chunk `[B, N, H, K, V]` in `store`, v_new in the values' dtype when w is
    given, the final state fp32)."""
    _require(supports(k, values, chunk, store) and (w is None or w.dtype == k.dtype), "state pass", k, values, chunk,
             store)
    b_, tp, heads, dk = k.shape
    dv = values.shape[-1]
    dtype = k.dtype
    correct = w is not None
    n_chunks = tp // chunk
    rows_of = lambda n: pl.ds(n * chunk, chunk)
    halves = _halves(dk)
    tiles = _swizzled(dtype)

    def kernel(*refs):
        w_g, refs = (refs[0], refs[1:]) if correct else (None, refs)
        u_g, k_g, f_g, d_g, h0_g, hs_g, *refs = refs
        vn_g, refs = (refs[0], refs[1:]) if correct else (None, refs)
        ht_g, (s_smem, stage_smem), u_smem, u_ready, h_ready = refs
        wg, b, h = _place(heads)
        cols = _columns(wg)
        s_ref, stage = s_smem.at[wg], stage_smem.at[wg]

        def fetch_values(n):  # into one of the warpgroup's two slots, a chunk ahead
            slot = _slot(n)
            plgpu.copy_gmem_to_smem(u_g.at[b, rows_of(n), h, cols], u_smem.at[wg, slot], u_ready.at[2 * wg + slot])

        def step(indices, *refs):
            (n,) = indices
            *w_ref, k_ref, f_ref, S = refs
            slot = _slot(n)
            u_ref = u_smem.at[wg, slot]
            decay = d_g[b, h, n]  # a load from memory: issued first
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last chunk's state and v_new have left

            @pl.when(n + 1 < n_chunks)
            def _():
                fetch_values(n + 1)

            _send_slab(S, s_ref, hs_g.at[b, n, h, :, cols])
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
            _save_slab(pipeline(_load_slab(h0_g.at[b, h, :, cols], stage, h_ready.at[wg])), stage,
                       ht_g.at[b, h, :, cols])

        tile_spec = plgpu.BlockSpec((chunk, dk), lambda n: (n, 0), transforms=tiles)
        pipeline = plgpu.emit_pipeline_warp_specialized(
            step, grid=(n_chunks,), memory_registers=40, wg_axis="wg", num_compute_wgs=_WARPGROUPS,
            max_concurrent_steps=2, compute_context=compute,
            in_specs=[tile_spec] * (1 + correct) + [plgpu.BlockSpec((chunk,), lambda n: (n,))])
        pipeline(*([w_g.at[b, :, h, :]] if correct else []), k_g.at[b, :, h, :], f_g.at[b, h, :])

    outs = (jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store),
            *([jax.ShapeDtypeStruct(values.shape, dtype)] if correct else []),
            jax.ShapeDtypeStruct((b_, heads, dk, dv), f32))
    scratch = (_state_buffers(dtype, dk), _per_warpgroup(dtype, 2, chunk),
               plgpu.Barrier(num_barriers=2 * _WARPGROUPS), plgpu.Barrier(num_barriers=_WARPGROUPS))
    run = _launch(kernel, outs, scratch, dv=dv, batch_heads=b_ * heads,
                  name="delta_states_mosaic" if correct else "chunk_states_mosaic")
    results = run(*([w] if correct else []), values, k, _by_head(write), _by_head(decay), h0)
    return results if correct else (results[0], None, results[1])


def state_gradient_pass(q, k, w, do, dv_local, read, write, decay, dfinal, *, chunk, scale, store):
    """`delta_rule.delta_dstates` in Mosaic GPU (same arguments and results; dv_local in the inputs' dtype).

    Per chunk from the last: dv_new = dv_local + (k dS) write; dS <- decay dS + scale (q read)^T do - w^T dv_new.
    Each chunk needs three `[C, K]` tiles (k, q, w), more than two slots of each fit beside the state slabs, so
    the memory warpgroup streams them by hand through a ring of three slots, in the order the compute
    warpgroups use them (k, then q, then w), each slot refilled once both have arrived on its barrier; each
    compute warpgroup fetches its do and dv_local tiles and the factors itself, a chunk ahead (one slot each,
    refilled as soon as read), and scales do while the tensor cores form k dS. The q and w products accumulate
    on the negated state, -dS' = decay (-dS) + q^T (-scale read do) + w^T dv_new (wgmma only adds), so that
    dv_new's one buffer is both the TMA store's source and the product's operand, and both are waited for once.

    Each chunk addresses its wgmma operands through an index read from memory (`opaque_zero`, always 0): with
    addresses the compiler could see were the same every chunk, it computed the descriptors of every operand
    tile once and kept them in registers across the loop, which spilled (448 bytes per thread) and serialized
    the products (0.64 ms against 0.30 at the benchmark's shapes, CHANGELOG.md, 2026-12-01)."""
    _require(supports(k, do, chunk, store) and q.dtype == w.dtype == dv_local.dtype == k.dtype,
             "state gradient pass", k, do, chunk, store)
    b_, tp, heads, dk = k.shape
    dv = do.shape[-1]
    dtype = k.dtype
    n_chunks = tp // chunk
    rows_of = lambda n: pl.ds(n * chunk, chunk)
    halves = _halves(dk)
    tiles = _swizzled(dtype)
    K_TILE, Q_TILE, W_TILE = range(3)  # ring slots, in the order a chunk uses them

    def kernel(q_g, k_g, w_g, do_g, dvl_g, r_g, f_g, d_g, df_g, zero_g, dh_g, dvn_g, dh0_g, ring, produced, consumed,
               state_smem, do_smem, dvl_smem, dvn_smem, r_smem, f_smem, do_ready, dvl_ready, h_ready):
        wg, b, h = _place(heads)
        chunk_of = lambda i: n_chunks - 1 - i  # the i-th chunk visited

        @pl.when(wg == _WARPGROUPS)
        def _memory():
            plgpu.set_max_registers(40, action="decrease")

            @pl.loop(0, n_chunks)
            def _(i):
                rows = rows_of(chunk_of(i))
                for slot, src in ((K_TILE, k_g), (Q_TILE, q_g), (W_TILE, w_g)):
                    @pl.when(i > 0)
                    def _():
                        plgpu.barrier_wait(consumed.at[slot])

                    plgpu.copy_gmem_to_smem(src.at[b, rows, h, :], ring.at[slot], produced.at[slot])

        @pl.when(wg < _WARPGROUPS)
        def _compute():
            plgpu.set_max_registers(232, action="increase")
            cols = _columns(wg)
            s_smem, stage_smem = state_smem
            do_ref, dvl_ref, r_ref, f_ref = do_smem.at[wg], dvl_smem.at[wg], r_smem.at[wg], f_smem.at[wg]

            def fetch_dvl(i):  # dv_local and the write factors of the i-th chunk visited
                rows = rows_of(chunk_of(i))
                plgpu.copy_gmem_to_smem(dvl_g.at[b, rows, h, cols], dvl_ref, dvl_ready.at[wg])
                plgpu.copy_gmem_to_smem(f_g.at[b, h, rows], f_ref, dvl_ready.at[wg])

            def fetch_do(i):  # do and the read factors
                rows = rows_of(chunk_of(i))
                plgpu.copy_gmem_to_smem(do_g.at[b, rows, h, cols], do_ref, do_ready.at[wg])
                plgpu.copy_gmem_to_smem(r_g.at[b, h, rows], r_ref, do_ready.at[wg])

            def step(i, dS):
                n = chunk_of(i)
                decay = d_g[b, h, n]  # loads from memory: issued first
                zero = zero_g[0]  # the products' operands are addressed through it (the docstring says why)
                tile = lambda slot: ring.at[slot + zero]
                s_ref, operand_do, dvn_ref = (x.at[wg + zero] for x in (s_smem, do_smem, dvn_smem))
                plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last chunk's dS and dv_new have left
                _send_slab(dS, s_ref, dh_g.at[b, n, h, :, cols])
                plgpu.barrier_wait(produced.at[K_TILE])

                def products(negated):
                    def k_dS(acc):
                        plgpu.wgmma(acc, tile(K_TILE), s_ref)
                        plgpu.barrier_wait(do_ready.at[wg])
                        r = plgpu.load(r_ref, layout=plgpu.Layout.WGMMA.reduce(1))
                        do_ref[...] = (do_ref[...].astype(f32) * lax.broadcast_in_dim(-scale * r, (chunk, _SLAB),
                                                                                      [0])).astype(dtype)
                        return acc[...]

                    kds = pl.run_scoped(k_dS, plgpu.ACC((chunk, _SLAB), f32))
                    plgpu.barrier_arrive(consumed.at[K_TILE])
                    plgpu.barrier_wait(dvl_ready.at[wg])
                    f = plgpu.load(f_ref, layout=plgpu.Layout.WGMMA.reduce(1))
                    dvn_ref[...] = (dvl_ref[...].astype(f32) + kds * lax.broadcast_in_dim(f, kds.shape, [0])
                                    ).astype(dtype)  # (the store waits for the warpgroup: dv_local is read)

                    @pl.when(i + 1 < n_chunks)
                    def _():
                        fetch_dvl(i + 1)

                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(dvn_ref, dvn_g.at[b, rows_of(n), h, cols])
                    for slot, operand in ((Q_TILE, operand_do), (W_TILE, dvn_ref)):
                        plgpu.barrier_wait(produced.at[slot])
                        for rows, acc in zip(halves, negated):
                            plgpu.wgmma(acc, tile(slot).at[:, rows].T, operand)

                negated = pl.run_state(products)(tuple(plgpu.ACC.init(x * -decay) for x in dS))
                plgpu.barrier_arrive(consumed.at[Q_TILE])
                plgpu.barrier_arrive(consumed.at[W_TILE])

                @pl.when(i + 1 < n_chunks)
                def _():
                    fetch_do(i + 1)

                return tuple(-x for x in negated)

            stage = stage_smem.at[wg]
            fetch_dvl(0)
            fetch_do(0)
            dS = lax.fori_loop(0, n_chunks, step, _load_slab(df_g.at[b, h, :, cols], stage, h_ready.at[wg]))
            _save_slab(dS, stage, dh0_g.at[b, h, :, cols])

    outs = (jax.ShapeDtypeStruct((b_, n_chunks, heads, dk, dv), store), jax.ShapeDtypeStruct(do.shape, store),
            jax.ShapeDtypeStruct((b_, heads, dk, dv), f32))
    vector = plgpu.SMEM((_WARPGROUPS, chunk), f32)
    tile = _per_warpgroup(dtype, chunk)
    scratch = (plgpu.SMEM((3, chunk, dk), dtype, transforms=tiles), plgpu.Barrier(num_barriers=3),
               plgpu.Barrier(num_arrivals=_WARPGROUPS, num_barriers=3), _state_buffers(dtype, dk), tile, tile, tile,
               vector, vector, plgpu.Barrier(num_arrivals=2, num_barriers=_WARPGROUPS),
               plgpu.Barrier(num_arrivals=2, num_barriers=_WARPGROUPS), plgpu.Barrier(num_barriers=_WARPGROUPS))
    run = _launch(kernel, outs, scratch, dv=dv, batch_heads=b_ * heads, name="delta_dstates_mosaic")
    opaque_zero = jnp.zeros((1,), jnp.int32)
    return run(q, k, w, do, dv_local, _by_head(read), _by_head(write), _by_head(decay), dfinal, opaque_zero)
