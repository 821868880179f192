"""Times the chunked kernels on one GPU: ours (impl="pallas", impl="chunk") and fla's Triton kernels, side by side.

Run on the GPU machine, with fla's wheels installed there (docs/benchmarks.md says how):
    python3 benchmarks/kernels.py --out bench.json            # T = 4096 and 16384 (impl="chunk" at 4096 only)
    python3 benchmarks/kernels.py --seqlens 4096 --impls pallas   # the quick comparison (fla autotunes for minutes)
    python3 benchmarks/kernels.py --seqlens 4096 --no-fla     # ours only
    python3 benchmarks/kernels.py --seqlens 4096 --impls pallas --chunk-sizes 64 128   # ours at two chunk sizes
    python3 benchmarks/kernels.py --seqlens 4096 --impls pallas pallas_triton  # Mosaic GPU state passes or not
    python3 benchmarks/kernels.py --breakdown                 # each Pallas kernel alone, several tile sizes

Shapes follow fla's 1.3B configs (B = 4, bf16 q/k/v, fp32 gates): GLA H=4, K=256, V=512;
Gated DeltaNet H=6, K=256, V=512; KDA (`--families kda`, against fla's chunk_kda) H=16, K=V=128. "fwd+bwd" is the forward pass (its output returned) plus
the gradients of every input. Times are per call: fla's by `triton.testing.do_bench` (CUDA
events), ours by the wall clock over `--reps` calls queued back to back (one wait at the end,
median of 5 rounds); peak memory is XLA's compiled buffer total (arguments, outputs,
temporaries) for JAX and `torch.cuda.max_memory_allocated` for fla, inputs included.
fla refuses its gated backward on Hopper with Triton [3.4.0, 3.7.1) (wrong gated dq/dk, fla issue #640); in that
range the guard is lifted to time it (its gradients then not trustworthy), and left alone from 3.7.1 on, which fixed
the miscompile (`scripts/pack_triton.sh` packs a newer Triton to carry). fla's rows record `triton` and
`hopper_guard_lifted`.
"""

import argparse
import itertools
import json
import os
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import ccq_jax.ops as ops  # noqa: E402
from benchmarks.tools import kernel_twins  # noqa: E402
from ccq_jax.ops.internals import chunk_cumsum, head_factors, layout  # noqa: E402
from pallas_kernels import ccq_read, delta_rule, delta_wy, mosaic_delta_states  # noqa: E402
from pallas_kernels import linear_attention as la  # noqa: E402
from pallas_kernels import linear_attention_grad as la_grad  # noqa: E402
from pallas_kernels.tiles import DEFAULT_CONFIG, KernelConfig  # noqa: E402

SHAPES = {"gla": dict(H=4, K=256, V=512), "gdn": dict(H=6, K=256, V=512), "kda": dict(H=16, K=128, V=128)}
OURS = {"gla": ("gla", "ccq_gla"), "gdn": ("gated_delta_rule", "ccq_gated_delta_rule"), "kda": ("kda", "ccq_kda")}
FLA = {"gla": "chunk_gla", "gdn": "chunk_gated_delta_rule", "kda": "chunk_kda"}


def bench_inputs(family, B, T, seed=0, shape=None):
    """NumPy inputs (bf16 values held as float32, gates fp32) shared by fla and ours; shape: {H, K, V} in place of
    the family's own."""
    s = shape or SHAPES[family]
    rng = np.random.default_rng(seed)
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    logsig = lambda x: -np.logaddexp(0, -x)
    H, K, V = s["H"], s["K"], s["V"]
    x = dict(q=normal(B, T, H, K), k=normal(B, T, H, K), v=normal(B, T, H, V), do=normal(B, T, H, V),
             lam=rng.uniform(0, 1, (B, T, H)).astype(np.float32))
    if family == "gla":
        x["g"] = logsig(normal(B, T, H, K) + 3.0).astype(np.float32)
    else:  # the delta rules: unit q and k, a gate per head (KDA: per channel), beta
        unit = lambda a: a / np.linalg.norm(a, axis=-1, keepdims=True)
        x["q"], x["k"] = unit(x["q"]), unit(x["k"])
        x["g"] = logsig(normal(B, T, H, *([K] if family == "kda" else [])) + 3.0).astype(np.float32)
        x["beta"] = rng.uniform(0, 1, (B, T, H)).astype(np.float32)
    return x


def fla_call(family, x):
    """(fn, do): fla's chunked op of `family` on the inputs x, moved to the GPU (bf16 q/k/v, fp32 gates, all
    requiring gradients), the bf16 output gradient, and whether fla's Hopper guard was lifted (only with a Triton
    before 3.7.1, whose gated backward it refuses on Hopper: timing only, those gradients are wrong there)."""
    import torch
    import fla.ops.common.chunk_o as chunk_o
    import fla.utils
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gla import chunk_gla
    from fla.ops.kda import chunk_kda

    # fla.utils keeps the GPU's own flag (chunk_o's copy is the one lifted, and stays lifted for later calls)
    lifted = fla.utils.IS_NVIDIA_HOPPER and not fla.utils.TRITON_ABOVE_3_7_1
    if lifted:
        chunk_o.IS_NVIDIA_HOPPER = False
    t = lambda a, dt=torch.bfloat16: torch.tensor(a, device="cuda").to(dt).requires_grad_()
    q, k, v = t(x["q"]), t(x["k"]), t(x["v"])
    g = t(x["g"], torch.float32)
    do = torch.tensor(x["do"], device="cuda").to(torch.bfloat16)
    if family == "gla":
        return (lambda: chunk_gla(q, k, v, g)[0]), do, lifted
    beta = t(x["beta"])
    op = chunk_kda if family == "kda" else chunk_gated_delta_rule
    return (lambda: op(q, k, v, g, beta)[0]), do, lifted


def time_fla(family, x, reps):
    import torch
    import triton

    fn, do, lifted = fla_call(family, x)
    bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=reps * 10, quantiles=[0.5])
    res = {"triton": triton.__version__, "hopper_guard_lifted": bool(lifted)}
    with torch.no_grad():
        res["fwd_ms"] = bench(fn)
    res["fwdbwd_ms"] = bench(lambda: fn().backward(do))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn().backward(do)
    torch.cuda.synchronize()
    res["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    fn = do = None  # frees fla's inputs before the cache is emptied
    torch.cuda.empty_cache()
    return res


def ours_fn(op_name, impl, grad, chunk=None):
    op = getattr(ops, op_name)

    def forward(q, k, v, g, beta, lam):
        delta = "delta" in op_name or "kda" in op_name
        args = [q, k, v, g] + ([beta] if delta else []) + ([lam] if op_name.startswith("ccq") else [])
        return op(*args, impl=impl, chunk_size=chunk)[0]

    if not grad:
        return jax.jit(forward)

    def fwd_bwd(q, k, v, g, beta, lam, do):  # o is returned too: left unused, XLA would drop the forward's output pass
        o, vjp = jax.vjp(forward, q, k, v, g, beta, lam)
        return o, vjp(do)

    return jax.jit(fwd_bwd)


def ours_args(x, grad):
    """The arguments of `ours_fn`'s functions from NumPy inputs x: bf16 q, k, v (and do with grad), fp32 gates."""
    bf = lambda a: jnp.asarray(a, jnp.bfloat16)
    return ([bf(x["q"]), bf(x["k"]), bf(x["v"]), jnp.asarray(x["g"]), jnp.asarray(x.get("beta", x["lam"])),
             jnp.asarray(x["lam"])] + ([bf(x["do"])] if grad else []))


def time_ours(op_name, impl, x, reps, chunk=None):
    res = {}
    for key, grad in (("fwd_ms", False), ("fwdbwd_ms", True)):
        fn = ours_fn(op_name, impl, grad, chunk)
        call_args = ours_args(x, grad)
        compiled = fn.lower(*call_args).compile()
        if grad:
            mem = compiled.memory_analysis()
            res["peak_gib"] = (mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes) / 2**30
        res[key] = _time_queued(compiled, call_args, reps)
    return res


def _time_queued(fn, args, reps, rounds=5):
    """ms per call: `reps` calls queued back to back (JAX dispatches asynchronously, so the GPU runs them
    without gaps, as `triton.testing.do_bench` runs fla's) and one wait; the median over `rounds`."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        outs = [fn(*args) for _ in range(reps)]
        jax.block_until_ready(outs)
        times.append((time.perf_counter() - t0) * 1e3 / reps)
    return statistics.median(times)


def _kernel_times(family, B, T, timed, shape=None, config=None):
    """Calls timed(name, jitted kernel, *its arguments) for each Pallas kernel of `family`'s passes and of the CCQ
    read, on the benchmark's inputs (B, T) and shapes (`shape`: {H, K, V} in place of the family's own), with the
    Triton kernels' `KernelConfig` `config` (None: each kernel's own tiling)."""
    C = 64
    jit = jax.jit
    x = bench_inputs(family, B, T, shape=shape)
    q, k, v, _, beta, lam, do = ours_args(x, grad=True)  # beta: the gated delta rule's (GLA: unused)
    lay = layout(jnp.zeros((B, T), jnp.int32), C)
    gate = "channel" if family == "gla" else "head"
    G = chunk_cumsum(jnp.asarray(x["g"]), C)
    H, K, V = q.shape[2], q.shape[3], v.shape[3]
    h0 = jnp.zeros((B, H, K, V), jnp.float32)
    kw = dict(chunk=C, interpret=jax.default_backend() == "cpu", config=config or DEFAULT_CONFIG)
    scores = jit(lambda q, k, G: la.intra_scores(q, k, G, lay.dd, gate=gate, **kw))
    try:
        A = scores(q, k, G)
    except Exception as err:  # the other kernels need the scores: this family's column stays empty
        print(f"{family}: intra_scores failed: {str(err)[:200]}", flush=True)
        return
    timed("intra_scores", scores, q, k, G)
    states = jnp.zeros((B, T // C, H, K, V), jnp.bfloat16)  # the kernels' [B, N, H, K, V], stored bf16
    # GLA's per-channel gates are applied to q beforehand (gated_inputs): there it runs ungated
    out_gate, out_G = ("head", G) if gate == "head" else (None, None)
    timed("chunk_out", jit(lambda q, S, A, v: la.chunk_out(
        q, out_G, lay.reads, S, A, v, gate=out_gate, transpose_scores=False, s_inter=1.0, s_intra=1.0,
        out_dtype=jnp.bfloat16, **kw)), q, states, A, v)
    timed("chunk_dscores", jit(lambda do, v: la_grad.chunk_dscores(do, v, lay.dd, scale=1.0, **kw)), do, v)
    if family == "gla":
        g = jnp.asarray(x["g"])
        timed("gated_inputs", jit(lambda g, q, k: la.gated_inputs(g, q, k, lay.reads, lay.writes, **kw)), g, q, k)
        timed("chunk_states", jit(lambda k, v, G: la.chunk_states(
            k, v, G, None, lay.keep, h0, gate=gate, store=jnp.bfloat16, **kw)), k, v, G)
        timed("diagonal_scores", jit(lambda q, k, G, A: la.diagonal_scores(q, k, G, lay.dd, A, **kw)), q, k, G, A)
        diag = jit(lambda q, k, G, A: la_grad.diagonal_dqk(q, k, G, A, lay.reads, lay.writes, **kw))
        timed("diagonal_dqk", diag, q, k, G, A)
        timed("chunk_dqk", jit(lambda q, k, v, do, G, S, A, D: la_grad.chunk_dqk(
            q, k, v, do, G, lay.reads, lay.writes, lay.keep, S, S, A, D, gate=gate, scale=1.0, **kw)),
            q, k, v, do, G, states, A, diag(q, k, G, A)[:2])
    else:
        w, factors = k, head_factors(G, lay, C)
        timed("delta_states", jit(lambda w, u, k, f: delta_rule.delta_states(
            w, u, k, f.write, f.decay, h0, store=jnp.bfloat16, **kw)), w, v, k, factors)
        timed("chunk_states (the backward's, from v_new)", jit(lambda k, v, f: la.chunk_states(
            k, v, None, f.write, f.decay, h0, gate=None, store=jnp.bfloat16, **kw)), k, v, factors)
        if not kw["interpret"]:  # the same two passes in Mosaic GPU (which the op runs on a GPU)
            mosaic = lambda w, v, k, f: mosaic_delta_states.state_pass(w, v, k, f.write, f.decay, h0, chunk=C,
                                                                       store=jnp.bfloat16)
            timed("delta_states (Mosaic GPU)", jit(mosaic), w, v, k, factors)
            timed("chunk_states (the backward's, Mosaic GPU)", jit(lambda v, k, f: mosaic(None, v, k, f)),
                  v, k, factors)
        timed("delta_dstates", jit(lambda q, k, do, f: delta_rule.delta_dstates(
            q, k, k, do, do, *f, h0, scale=1.0, store=jnp.bfloat16, **kw)), q, k, do, factors)
        if not kw["interpret"]:
            timed("delta_dstates (Mosaic GPU)", jit(lambda q, k, do, f: mosaic_delta_states.state_gradient_pass(
                q, k, k, do, do, *f, h0, chunk=C, scale=1.0, store=jnp.bfloat16)), q, k, do, factors)
        inverse = jit(lambda k, G, beta: delta_wy.wy_inverse(k, G, beta, lay.dd, **kw))
        timed("wy_inverse", inverse, k, G, beta)
        chunks_T = inverse(k, G, beta)
        timed("wy_apply", jit(lambda T, k, v, G, beta: delta_wy.wy_apply(
            T, k, v, G, beta, lay.reads, **kw)), chunks_T, k, v, G, beta)
        timed("wy_apply (w alone)", jit(lambda T, k, G, beta: delta_wy.wy_apply(
            T, k, None, G, beta, lay.reads, **kw)[0]), chunks_T, k, G, beta)
        timed("wy_gradient", jit(lambda k, v, G, beta, T, dw, du, dk: delta_wy.wy_gradient(
            k, v, G, beta, lay.reads, lay.dd, T, dw, du, dk, **kw)), k, v, G, beta, chunks_T, k, do,
            k.astype(jnp.float32))
        timed("delta_dqkwg", jit(lambda q, k, do, G, A, S: delta_rule.delta_dqkwg(
            q, k, do, do, do, G, A, lay.reads, lay.writes, lay.keep, S, S, scale=1.0, **kw)),
            q, k, do, G, A, states)
        xla_wy = lambda k, v, G, beta: kernel_twins.wy(k, v, G, beta, lay, C)
        timed("delta_wy (XLA)", jit(xla_wy), k, v, G, beta)
        timed("delta_wy vjp (XLA)", jit(lambda k, v, G, beta, dw, du: jax.vjp(xla_wy, k, v, G, beta)[1](
            (dw.astype(jnp.float32), du.astype(jnp.float32)))), k, v, G, beta, k, do)
    c = q  # C q, m^ and dm in q's dtype, as the op has them; the CCQ read's ends, 16 or 32 rows a program
    sums, counts = jnp.zeros((B, T // C, H, K), jnp.float32), jnp.ones((B, T // C, H), jnp.float32)
    for n_rows in (16, 32):
        ccq_kw = dict(kw, rows=n_rows)
        timed(f"statistics_keys/{n_rows}", jit(lambda k: ccq_read.statistics_keys(
            k, lay.writes, eps=1e-6, **ccq_kw)), k)
        timed(f"clean_query/{n_rows}", jit(lambda q, m, c, lam: ccq_read.clean_query(
            q, m, c, lam, lay.reads, lay.dd, sums, counts, **ccq_kw)), q, k, c, lam)
        timed(f"clean_query_grad/{n_rows}", jit(lambda g, q, m, c, lam: ccq_read.clean_query_grad(
            g, q, m, c, lam, lay.reads, lay.dd, sums, counts, **ccq_kw)), q, q, k, c, lam)
        timed(f"key_grad/{n_rows}", jit(lambda k, dkh, dm: ccq_read.key_grad(
            k, dkh, dm, sums, lay.writes, lay.dd, eps=1e-6, **ccq_kw)), k, k, c)
    # the CCQ covariance: an ungated linear attention with values k (K = V), its kernels as _ccq_read runs them
    cov_kw = dict(kw, gate=None)
    cov_scores = jit(lambda q, k: la.intra_scores(q, k, None, lay.dd, **cov_kw))
    timed("cov intra_scores", cov_scores, q, k)
    timed("cov intra_scores (and the keys' running sums)", jit(lambda q, k: la.intra_scores(
        q, k, None, lay.dd, key_sums=True, **cov_kw)), q, k)
    A_cov, h0_cov = cov_scores(q, k), jnp.zeros((B, H, K, K), jnp.float32)
    timed("cov chunk_states", jit(lambda k: la.chunk_states(
        k, k, None, lay.writes, lay.keep, h0_cov, store=jnp.bfloat16, **cov_kw)), k)
    timed("cov chunk_states (reverse)", jit(lambda q, dc: la.chunk_states(
        q, dc, None, lay.reads, lay.keep, h0_cov, reverse=True, scale=1.0, store=jnp.bfloat16, **cov_kw)), q, k)
    cov_states = jnp.zeros((B, T // C, H, K, K), jnp.bfloat16)
    timed("cov chunk_out", jit(lambda q, S, A, k: la.chunk_out(
        q, None, lay.reads, S, A, k, transpose_scores=False, s_inter=1.0, s_intra=1.0,
        out_dtype=jnp.bfloat16, **cov_kw)), q, cov_states, A_cov, k)
    timed("cov chunk_dqk (keys' gradient of both uses)", jit(lambda q, k, dc, S, A: la_grad.chunk_dqk(
        q, k, k, dc, None, lay.reads, lay.writes, lay.keep, S, S, A, None, scale=1.0, scores=A, **cov_kw)),
        q, k, k, cov_states, A_cov)


def breakdown(B, T, reps, configs, families, kernels=None, shape=None):
    """Times each kernel of the GLA and gated-delta-rule passes alone, for several (tile width, warps, stages)
    settings (`KernelConfig`s); "default" in a place keeps each kernel's own choice there. kernels: name parts;
    only the kernels whose names contain one are timed (all when None)."""

    def run(fn, *args):
        try:
            jax.block_until_ready(fn(*args))
        except Exception as err:  # a tiling that does not compile must not stop the sweep
            print(f"failed: {type(err).__name__}: {str(err)[:300]}", flush=True)
            return float("nan")
        return _time_queued(fn, args, reps)

    rows = []
    for width, warps, stages in configs:
        for family in families:
            t = {}

            def timed(name, fn, *args):
                if kernels is None or any(part in name for part in kernels):
                    t[name] = run(fn, *args)

            chosen = {key: n for key, n in zip(("width", "num_warps", "num_stages"), (width, warps, stages))
                      if n != "default"}
            _kernel_times(family, B, T, timed, shape, KernelConfig(**chosen))
            for name, ms in t.items():  # the Mosaic GPU kernels take no tile overrides
                tiling = ("-",) * 3 if "Mosaic GPU" in name else (width, warps, stages)
                rows.append(dict(family=family, kernel=name, **dict(zip(("width", "warps", "stages"), tiling)), ms=ms))
                print(rows[-1], flush=True)
    print("\n| family | kernel | tile | warps | stages | ms |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['family']} | {r['kernel']} | {r['width']} | {r['warps']} | {r['stages']} | {r['ms']:.3f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqlens", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--impls", nargs="*", default=["pallas", "chunk"], help="none: fla alone")
    ap.add_argument("--families", nargs="+", default=["gla", "gdn"], choices=sorted(SHAPES))
    ap.add_argument("--xla-max-t", type=int, default=4096, help="time impl=chunk only up to this T (slow, large)")
    ap.add_argument("--chunk-sizes", type=int, nargs="+", default=[None],
                    help="ours: each op at each chunk size (default: the op's own)")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="bench_kernels.json")
    ap.add_argument("--breakdown", action="store_true", help="time each Pallas kernel alone (first seqlen)")
    ap.add_argument("--tilings", nargs="+", default=["default", "64/4", "32/4", "64/8", "128/8"],
                    help="breakdown columns: 'default' (each kernel's own) or WIDTH/WARPS[/STAGES]")
    ap.add_argument("--kernels", nargs="+", help="breakdown: time only the kernels whose names contain one of these")
    ap.add_argument("--shape", help="breakdown: H,K,V for every family in place of its own (the 100m GLA: 3,128,256)")
    a = ap.parse_args()
    if a.breakdown and "kda" in a.families:
        ap.error("--families: the breakdown times GLA's and Gated DeltaNet's kernels; leave kda out of it")
    if a.breakdown:
        configs = [(["default"] * 3 if c == "default" else c.split("/") + ["default"])[:3] for c in a.tilings]
        configs = [tuple(int(x) if x != "default" else x for x in c) for c in configs]
        shape = dict(zip("HKV", map(int, a.shape.split(",")))) if a.shape else None
        rows = breakdown(a.batch, a.seqlens[0], a.reps, configs, a.families, a.kernels, shape)
        json.dump(rows, open(a.out, "w"), indent=1)
        return
    rows = []
    for T in a.seqlens:
        for family in a.families:
            x = bench_inputs(family, a.batch, T)
            for impl in [i for i in a.impls if i != "chunk" or T <= a.xla_max_t]:
                for op_name, chunk in itertools.product(OURS[family], a.chunk_sizes):
                    try:
                        r = time_ours(op_name, impl, x, a.reps, chunk)
                    except Exception as err:  # report and go on: one failing variant must not hide the others
                        r = dict(error=f"{type(err).__name__}: {str(err)[:300]}")
                    label = f"ours {op_name} ({impl}" + (f", chunk {chunk})" if chunk else ")")
                    rows.append(dict(T=T, family=family, what=label, **r))
                    print(rows[-1], flush=True)
            if not a.no_fla:  # last: fla's Triton autotuning takes minutes on a fresh machine
                name = f"fla {FLA[family]}"
                rows.append(dict(T=T, family=family, what=name, **time_fla(family, x, a.reps)))
                print(rows[-1], flush=True)
    json.dump(rows, open(a.out, "w"), indent=1)
    print_table(rows)


def print_table(rows):
    fla = {(r["T"], r["family"]): r for r in rows if r["what"].startswith("fla") and "error" not in r}
    print("\n| T | what | fwd ms | fwd+bwd ms | peak GiB | fwd / fla | fwd+bwd / fla |\n|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['T']} | {r['what']} | error: {r['error'][:80]} |")
            continue
        base = fla.get((r["T"], r["family"]))
        ratio = lambda key: f"{r[key] / base[key]:.2f}" if base else "-"
        print(f"| {r['T']} | {r['what']} | {r['fwd_ms']:.2f} | {r['fwdbwd_ms']:.2f} | {r['peak_gib']:.2f} | "
              f"{ratio('fwd_ms')} | {ratio('fwdbwd_ms')} |")


if __name__ == "__main__":
    main()
