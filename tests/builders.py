"""The one fixture module: inputs, models and checks that several test modules share (tests import these from
here, never from another test module or a conftest).

  numbers     rel_rms (fla's metric)
  ops         OP_CASES, make_inputs (fla's gate recipes), packed_segments, flags, op_gradients,
              float64_ground_truth
  kernels     KERNEL_OPS, TPU_KERNEL_OPS, kernel_inputs, check_op (impl="pallas" against the float64 recurrence),
              tolerances
  layers      layer_inputs, randomize, layer_params, call, SEGMENTS
  models      MODEL_CASES, HYBRID_CASES, build, token_ids, forward, prefill_then_decode, inner_jaxprs
  conversion  FIXTURES, GOLDENS, random_model, flat_params, assert_same_params, TORCH_PYTHON
  sharding    shard_map_check (tests/ops/shard_map_check.py in a process of its own)
"""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import ccq_jax.ops as ops
from ccq_jax import layers
from ccq_jax.inference import decode_step, init_cache, prefill
from ccq_jax.models import CausalLM, abstract_model, get_config
from ccq_jax.models.files import read_safetensors
from ccq_jax.models.state_dict import load_layer

# ---- numbers -------------------------------------------------------------------------------------------------


def rel_rms(actual, expected):
    """fla's metric: ||actual - expected||_2 / ||expected||_2 (in float64)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(actual - expected) / max(np.linalg.norm(expected), 1e-30))


# ---- ops: random inputs with fla's gate recipes, packed segments ----------------------------------------------

B, T, H, K, V = 2, 70, 2, 16, 12
OP_CASES = ("weak_decay", "strong_decay", "zeroed_gates", "segments")


def log_decay(rng, shape, case):
    x = rng.standard_normal(shape)
    if case == "strong_decay":
        return -np.logaddexp(0, -x) / 0.1  # logsigmoid(x) / 0.1: decays of exp(-7) per token
    g = -np.logaddexp(0, -(x + 3))  # logsigmoid(x + 3): mild decay
    if case == "zeroed_gates":
        g = np.where(rng.random(shape) < 0.5, 0.0, g)
    return g


def packed_segments(t):
    """[2, t] int32 segment ids: row 0 four documents, the last id one that came before (a new document all the
    same), row 1 two documents, the second 5 tokens long."""
    cuts = [t // 7, t // 3 + 1, (9 * t) // 10 - t // 7 - t // 3 - 1]
    lengths = [cuts + [t - sum(cuts)], [t - 5, 5]]
    return np.stack([np.repeat([0, 1, 2, 1], lengths[0]), np.repeat([7, 3], lengths[1])]).astype(np.int32)


def _initial_stats(rng, h, dk):
    init_k = rng.standard_normal((2, h, 5, dk))
    init_k /= np.linalg.norm(init_k, axis=-1, keepdims=True)
    f32 = lambda x: np.asarray(x, np.float32)
    return (f32(np.einsum("bhnk,bhnl->bhkl", init_k, init_k)), f32(init_k.sum(2)), f32(np.full((2, h), 5.0)))


def make_inputs(seed, case, t=T, k_norm=False):
    """Inputs for every op as float32 NumPy arrays, plus initial state / statistics and segment ids."""
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, np.float32)
    k = rng.standard_normal((B, t, H, K))
    if k_norm:
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    segments = packed_segments(t) if case == "segments" else None
    stats = _initial_stats(rng, H, K)
    return dict(
        q=f32(rng.standard_normal((B, t, H, K))),
        k=f32(k),
        v=f32(rng.standard_normal((B, t, H, V))),
        g=f32(log_decay(rng, (B, t, H, K), case)),
        g_head=f32(log_decay(rng, (B, t, H), case)),
        beta=f32(rng.uniform(0, 1, (B, t, H))),
        lam=f32(rng.uniform(0, 1, (B, t, H))),
        initial_state=f32(rng.standard_normal((B, H, K, V))),
        initial_stats=stats,
        segment_ids=segments,
    )


# ---- ops: gradients of every input through a loss that touches every output ------------------------------------

ALL_FINAL = {"output_final_state": True, "output_final_stats": True}
FLAGS = {ops.gla: {"output_final_state": True}, ops.gated_delta_rule: {"output_final_state": True},
         ops.ccq_query: {"output_final_stats": True}, ops.ccq_gla: ALL_FINAL, ops.ccq_gated_delta_rule: ALL_FINAL,
         **{op: {"output_final_state": True} for op in (ops.generalized_delta_rule, ops.kda, ops.gated_delta_rule_2,
                                                       ops.qed)},
         **{op: ALL_FINAL for op in (ops.ccq_generalized_delta_rule, ops.ccq_kda, ops.ccq_gated_delta_rule_2,
                                     ops.ccq_qed)}}


def flags(op):
    """The output flags of an op (or of a functools.partial of one, options bound)."""
    return FLAGS[getattr(op, "func", op)]


def _loss_fn(op, x, impl, chunk, seed):
    """A scalar that touches every output (o and all final states) with random weights."""
    rng = np.random.default_rng(seed)

    def weighted(tree):
        return sum(jnp.sum(a * rng.standard_normal(a.shape).astype(a.dtype)) for a in jax.tree.leaves(tree))

    def loss(args):
        out = op(*args["pos"], **args["kw"], **flags(op), segment_ids=x["segment_ids"], impl=impl, chunk_size=chunk)
        return weighted(out)

    return loss


def op_gradients(op, pos, kw, x, impl, chunk):
    # same seed => same random output weights for every impl
    return jax.grad(_loss_fn(op, x, impl, chunk, seed=0))({"pos": pos, "kw": kw})


def float64_ground_truth(op, pos, kw, x):
    with jax.enable_x64(True):
        to64 = lambda a: jnp.asarray(a, jnp.float64)
        grads = op_gradients(op, jax.tree.map(to64, pos), jax.tree.map(to64, kw), x, "recurrent", None)
        return jax.tree.map(np.asarray, grads)


# ---- kernels: impl="pallas" against the float64 recurrence (tiny and interpreted on a CPU, full size on a GPU) ---

FP32_TOL = 1e-4  # fla's chunk numerics (decays as differences of in-chunk cumsums): measured <= 2e-5
OUT_TOL, GRAD_TOL, GATE_GRAD_TOL = 0.005, 0.008, 0.02  # fla's half-precision tolerances
KERNEL_OPS = {
    "gla": ["q", "k", "v", "g"],
    "gated_delta_rule": ["q", "k", "v", "g_head", "beta"],
    "ccq_query": ["q", "k", "lam"],
    "ccq_gla": ["q", "k", "v", "g", "lam"],
    "ccq_gated_delta_rule": ["q", "k", "v", "g_head", "beta", "lam"],
}
# ops whose kernels are Mosaic TPU's only (impl="pallas" on a GPU refuses them; check_op takes them all the same)
TPU_KERNEL_OPS = {"generalized_delta_rule": ["q", "k", "v", "g", "a"],
                  "ccq_generalized_delta_rule": ["q", "k", "v", "g", "a", "lam"]}
OP_INPUTS = {**KERNEL_OPS, **TPU_KERNEL_OPS}
GATES = ("g", "g_head", "beta", "lam")


def kernel_inputs(seed, t, h=2, dk=12, dv=20, segments=True):
    """fp32 inputs for every op, two rows of packed documents (`packed_segments`; one document each without
    `segments`): row 0 with strong decay
    (exp(-7) per token on average), row 1 with half its gates exactly zero (fla's recipes).

    Keys have unit norm (the gated delta rule needs ||k|| <= 1 to stay stable over long T). The generalized delta
    rule's erase vector a = b * k, b in [0, 1]^K (GDN-2's), comes from a generator of its own (seed + 1000), so
    that the other inputs stay as they were.
    """
    rng = np.random.default_rng(seed)
    f32 = lambda x: np.asarray(x, np.float32)
    gates = lambda *shape: np.stack([log_decay(rng, shape, "strong_decay"), log_decay(rng, shape, "zeroed_gates")])
    k = rng.standard_normal((2, t, h, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    stats = ops.CCQStats(*_initial_stats(rng, h, dk))
    return dict(
        q=f32(rng.standard_normal((2, t, h, dk))),
        k=f32(k),
        v=f32(rng.standard_normal((2, t, h, dv))),
        g=f32(gates(t, h, dk)),
        g_head=f32(gates(t, h)),
        beta=f32(rng.uniform(0, 1, (2, t, h))),
        lam=f32(rng.uniform(0, 1, (2, t, h))),
        initial_state=f32(rng.standard_normal((2, h, dk, dv))),
        initial_stats=stats,
        segment_ids=packed_segments(t) if segments else None,
        a=f32(np.random.default_rng(seed + 1000).uniform(0, 1, k.shape) * k),
    )


def op_arguments(name, x, dtype):
    """Positional and keyword inputs of op `name`; q, k, v (and the erase vector a) in `dtype`, gates, beta, lam and
    states fp32."""
    pos = [jnp.asarray(x[n], dtype) if n in ("q", "k", "v", "a") else x[n] for n in OP_INPUTS[name]]
    kw = {}
    if name != "ccq_query":
        kw["initial_state"] = x["initial_state"]
    if name.startswith("ccq"):
        kw["initial_stats"] = x["initial_stats"]
    return pos, kw


def check_op(name, x, chunk, dtype=jnp.float32, impl="pallas", **options):
    """Outputs, final states and all gradients of `impl` (a kernel backend) against the float64 recurrence.

    fp32: every relative RMS < FP32_TOL. bf16 (q, k, v rounded; the reference sees the same
    rounded values): fla's tolerances. options: the op's keyword options (centered=False, ...).
    """
    op = functools.partial(getattr(ops, name), **options)
    pos, kw = op_arguments(name, x, dtype)
    ref_pos = [np.asarray(p, np.float32) for p in pos]
    call = dict(**flags(op), segment_ids=x["segment_ids"])
    got = op(*pos, **kw, **call, impl=impl, chunk_size=chunk)
    with jax.enable_x64(True):
        to64 = lambda a: jnp.asarray(a, jnp.float64)
        want = jax.tree.map(np.asarray, op(*map(to64, ref_pos), **jax.tree.map(to64, kw), **call, impl="recurrent"))
    fp32 = dtype == jnp.float32
    assert jax.tree.leaves(got)[0].dtype == dtype
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        err = rel_rms(np.asarray(g, np.float32), w)
        assert err < (FP32_TOL if fp32 else OUT_TOL), f"{name} {jax.tree_util.keystr(path)}: relative RMS {err:.2e}"

    want = float64_ground_truth(op, ref_pos, kw, x)
    got = op_gradients(op, pos, kw, x, impl, chunk)
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(want), jax.tree.leaves(got)):
        label = OP_INPUTS[name][path[1].idx] if path[0].key == "pos" else jax.tree_util.keystr(path[1:])
        assert np.all(np.isfinite(np.asarray(g, np.float32))), f"{name} d{label}: not finite"
        tol = FP32_TOL if fp32 else (GATE_GRAD_TOL if label in GATES else GRAD_TOL)
        err = rel_rms(np.asarray(g, np.float32), w)
        assert err < tol, f"{name} d{label}: relative RMS {err:.2e} (tolerance {tol})"


# ---- layers: random inputs and parameters that exercise every path --------------------------------------------

LAYER_T, D = 19, 32
# three documents in row 0 (the middle one a single token), one in row 1
SEGMENTS = np.array([[0] * 3 + [1] + [2] * 15, [5] * LAYER_T], np.int32)


def layer_inputs(seed=0, t=LAYER_T):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((2, t, D)), jnp.float32)


def randomize(module, seed=1, scale=0.3):
    """Replace every parameter by random values (CCQ weights start at zero, norms at one: too special)."""
    rng = np.random.default_rng(seed)
    for _, var in nnx.iter_graph(module):
        if isinstance(var, nnx.Param):
            var.value = jnp.asarray(scale * rng.standard_normal(var.value.shape), var.value.dtype)
    return module


def layer_params(module):
    return jax.tree.map(np.asarray, nnx.state(module, nnx.Param).to_pure_dict())


@nnx.jit
def call(layer, x, segment_ids=None, cache=None):
    """The layer's forward, compiled (one compile per shape is much cheaper than eager op-by-op dispatch)."""
    return layer(x, segment_ids=segment_ids, cache=cache)


# ---- models: tiny models with random CCQ gates, token ids, a jitted forward -----------------------------------

# every family with and without CCQ; GLA with its short convs and grouped keys, chunks shorter than the prompts.
# Weights ~ N(0, 0.1) rather than fla's 0.02: then every mixer's output is as large as the residual stream
# (at 0.02, GLA behind short convs adds ~1e-6 to it, and any decoding bug in it would go unseen).
INIT = dict(initializer_range=0.1)
CHUNK_4 = {"kernel.chunk_size": 4}
MODEL_CASES = {
    "transformer": ("transformer-tiny", INIT),
    "gla": ("gla-tiny", dict(INIT, **CHUNK_4)),
    "gdn": ("gdn-tiny", dict(INIT, **CHUNK_4)),
    "ccq-gla": ("ccq-gla-tiny", dict(INIT, **CHUNK_4, use_short_conv=True, num_kv_heads=2)),
    "ccq-gdn": ("ccq-gdn-tiny", dict(INIT, **CHUNK_4)),
}


# hybrids: GLA with grouped-query attention on layers 1 and 3; CCQ-GDN with an 8-token window on layer 3 (shorter than
# the tests' rows); CCQ-GLA with every attention option (window, partial RoPE, NoPE, output gate, biases, MQA)
HYBRID_CASES = {
    "gla-hybrid": ("gla-hybrid-tiny", dict(INIT, **CHUNK_4)),
    "ccq-gdn-hybrid": ("ccq-gdn-hybrid-tiny", dict(INIT, **CHUNK_4)),
    "ccq-gla-hybrid-options": ("ccq-gla-hybrid-tiny", dict(INIT, **CHUNK_4, attn=[
        dict(layers=[1], num_heads=2, window_size=5, rotary_dim=16, output_gate=True, qkv_bias=True),
        dict(layers=[3], num_heads=4, num_kv_heads=1, rotary_dim=0)])),
}


def build(name, overrides=None, seed=0):
    """A tiny model; CCQ gate weights (zero at init) get random values so the CCQ read matters."""
    model = CausalLM(get_config(name, **(overrides or {})), rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed + 100)
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Param) and "ccq" in path:
            var.value = jnp.asarray(rng.standard_normal(var.value.shape), var.value.dtype)
    return model


def token_ids(shape, seed=0, vocab=256):
    return jnp.asarray(np.random.default_rng(seed).integers(0, vocab, shape), jnp.int32)


@nnx.jit
def forward(model, input_ids, segment_ids=None):
    return model(input_ids, segment_ids)


def logits_and_grads(model, input_ids, segment_ids):
    """(logits, the flat state of d mean(sin(logits)) / d params) of `model`, jitted: a loss every logit moves."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(params):
        logits = nnx.merge(graphdef, params, rest)(input_ids, segment_ids)
        return jnp.mean(jnp.sin(logits)), logits

    (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return logits, nnx.to_flat_state(grads)


def prefill_then_decode(model, input_ids, segment_ids, prompt):
    """Logits [B, T, E] of a prefill of the first `prompt` tokens, then one decode step per token after them: what
    `forward(model, input_ids, segment_ids)` gives (the decoded tokens continue each row's last segment)."""
    cache = init_cache(model, *input_ids.shape)
    logits, cache = prefill(model, input_ids[:, :prompt], cache, segment_ids=segment_ids[:, :prompt])
    steps = [logits]
    for t in range(prompt, input_ids.shape[1]):
        step_logits, cache = decode_step(model, input_ids[:, t], cache)
        steps.append(step_logits[:, None])
    return jnp.concatenate(steps, axis=1)


# ---- conversion: the golden folders, presets with random parameters --------------------------------------------

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fla"
GOLDENS = sorted(p.name for p in FIXTURES.iterdir() if (p / "logits.npy").is_file())
LAYER_GOLDENS = sorted(p.name for p in FIXTURES.iterdir() if (p / "layer.safetensors").is_file())
# a Python with torch, transformers and fla for the tests that run fla live (CI has none: they are skipped there):
# CCQ_TORCH_PYTHON (e.g. a Python 3.11 venv with the CPU torch wheel), else this Python if it has torch and fla
TORCH_PYTHON = os.environ.get("CCQ_TORCH_PYTHON") or (
    sys.executable if importlib.util.find_spec("torch") and importlib.util.find_spec("fla") else None)


def layer_golden(case, **options):
    """(our layer with the parameters of fla's layer in golden `case`, its input x, fla's output y); options: our
    layer's own (e.g. kernel=KernelPolicy(...))."""
    folder = FIXTURES / case
    spec = json.loads((folder / "config.json").read_text())
    config = dict(spec["config"])
    layer = getattr(layers, spec["kind"])(config.pop("hidden_size"), **config, **options, rngs=nnx.Rngs(0))
    load_layer(layer, read_safetensors(folder / "layer.safetensors"))
    return layer, np.load(folder / "x.npy"), np.load(folder / "y.npy")


def random_model(name, seed=0, **overrides):
    """A preset with random parameters, drawn in NumPy (no JAX work: building the model costs nothing)."""
    model = abstract_model(get_config(name, **overrides))
    rng = np.random.default_rng(seed)
    nnx.update(model, nnx.from_flat_state({
        path: jnp.asarray(0.3 * rng.standard_normal(var.get_value().shape), var.get_value().dtype)
        for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}))
    return model


def flat_params(model):
    """Flat {path: NumPy array} of a model's parameters."""
    return {path: np.asarray(var[...]) for path, var in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def assert_same_params(a, b):
    """Bit-exact: the same paths, dtypes, shapes and values."""
    pa, pb = flat_params(a), flat_params(b)
    assert list(pa) == list(pb)
    for path in pa:
        np.testing.assert_array_equal(pa[path], pb[path], strict=True, err_msg=str(path))


def shard_map_check(impls, cpu_devices=None):
    """The worst relative RMS error of tests/ops/shard_map_check.py for `impls`, run in a process of its own (on
    `cpu_devices` fake CPU devices, else this machine's devices), after checking it printed every row."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    if cpu_devices:
        env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={cpu_devices}",
                   JAX_DISABLE_MOST_OPTIMIZATIONS="true")
    out = subprocess.run([sys.executable, "-m", "tests.ops.shard_map_check", ",".join(impls)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    rows = out.stdout.strip().splitlines()
    assert len(rows) == len(impls) * (5 * 2 + 1) + 1, out.stdout  # 5 ops two ways, the shared state; the worst
    return float(rows[-1].split()[-1])


def import_cycle(graph: dict) -> list:
    """The first cycle of the directed graph {module: modules it imports} (a depth-first search in sorted order),
    as [m, ..., m]; [] when there is none. The house-rule tests' shared check."""
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return cycles[0] if cycles else []


def inner_jaxprs(eqn):
    """The jaxprs nested in one equation's parameters (a jit's, a checkpoint's, a loop's body), for walks over a
    whole program."""
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(item, "jaxpr", item)
            if hasattr(inner, "eqns"):
                yield inner
