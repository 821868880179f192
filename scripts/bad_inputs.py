"""Re-run the bad inputs of the first-week review (issue 53) and write docs/bad-inputs.md.

    JAX_PLATFORMS=cpu .venv/bin/python scripts/bad_inputs.py              # every case, then the doc (a few minutes)
    JAX_PLATFORMS=cpu .venv/bin/python scripts/bad_inputs.py --area ops --no-write

Each case tries one bad (or odd but legal) input the way a user would: an op call eagerly, under `jax.jit` and
under `ccq_jax.ops.checked`; a model forward or `generate`; `ccq-train` / `ccq-eval` / `ccq-prepare-data` /
`ccq-convert` in this process (their `main`, stderr captured) or, where the way the process ends matters, as a
subprocess with a timeout. What it gets is classified by `verdict`:

  clear    a ValueError / FileNotFoundError, a failed checkify check, or an `error:` line with exit status 2, whose
           message holds every word the case expects (the argument, the file, the value)
  silent   no error where one was due, or a wrong result; `silent (documented jit gap, switchable)` when it is a
           value check that plain `jax.jit` skips (`ccq_jax.ops.checked`, `TrainConfig.checks="checkify"` run it)
  crash    any other exception, an expected error without its words, a non-zero exit without an `error:` line,
           a signal or a timeout
  correct  accepted, and the result is right

Trained runs are tiny (one 32-wide GLA layer on MQAR, 4 steps) and share one scratch folder per run of the script.
"""

import argparse
import contextlib
import dataclasses
import datetime
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's packages (train, eval) beside ccq_jax
    sys.path.insert(0, str(ROOT))

import ccq_jax.ops as ops  # noqa: E402
from ccq_jax.inference.generate import generate  # noqa: E402
from ccq_jax.models import CausalLM, get_config  # noqa: E402

DOC = ROOT / "docs" / "bad-inputs.md"
AREAS = ("ops", "model", "config", "checkpoint", "data", "cli")
JIT_GAP = "silent (documented jit gap, switchable)"
VERDICTS = ("clear", "correct", JIT_GAP, "silent", "crash")
REVIEW = {"clear": 94, "silent": 22, "crash": 12, "correct": 16}  # the review's 144 rows (its 22 silent: 11 jit gap)
SUBPROCESS_TIMEOUT = 300


class ErrorLine(Exception):
    """A CLI ended with exit status 2 and an `error:` line (its text is the message)."""


class BadExit(Exception):
    """A CLI ended with a non-zero status and no `error:` line, a signal or a timeout."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input: `run(scratch)` tries it and returns whether the result is right (True / False) or None when
    nothing but acceptance is checked. `names`: the words its error must hold; () when it should be accepted.
    `jit_gap`: a value check plain jit skips by design (documented, switchable)."""
    area: str
    tried: str
    run: Callable[[pathlib.Path], bool | None]
    names: tuple[str, ...] = ()
    jit_gap: bool = False


@dataclasses.dataclass(frozen=True)
class Row:
    case: Case
    verdict: str
    got: str


CLEAR_ERRORS = (ValueError, FileNotFoundError, ErrorLine, jax.errors.JaxRuntimeError)


def first_line(text: str, width: int = 150) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= width else line[:width - 3] + "..."


def verdict(case: Case, scratch: pathlib.Path) -> Row:
    """Try `case` and classify what the user gets (the scratch folder's path written as $SCRATCH)."""
    row = classify(case, scratch)
    return dataclasses.replace(row, got=row.got.replace(str(scratch), "$SCRATCH"))


def classify(case: Case, scratch: pathlib.Path) -> Row:
    try:
        right = case.run(scratch)
    except CLEAR_ERRORS as err:
        message = str(err)
        got = f"{type(err).__name__}: {first_line(message)}" if not isinstance(err, ErrorLine) else first_line(message)
        if case.names and all(word in message for word in case.names):
            return Row(case, "clear", got)
        return Row(case, "crash", got + ("" if case.names else "  (refused a valid input)"))
    except BadExit as err:
        return Row(case, "crash", first_line(str(err)))
    except Exception as err:  # noqa: BLE001 - whatever else a user would see is what this table reports
        return Row(case, "crash", f"{type(err).__name__}: {first_line(str(err))}")
    if case.names:
        return Row(case, JIT_GAP if case.jit_gap else "silent", "no error" + ("" if right is None else
                                                                                  f"; result right: {right}"))
    return Row(case, "correct" if right in (None, True) else "silent", "accepted" + ("" if right is None else
                                                                                       f"; result right: {right}"))


# ---- running the CLIs ----------------------------------------------------------------------------------------------


def cli(main, argv, cwd=None) -> str:
    """Call a console script's `main(argv)` here; its stdout, or ErrorLine / BadExit as its exit would show."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as stop:
        code = stop.code
    finally:
        os.chdir(here)
    return ended(code or 0, out.getvalue(), err.getvalue())


def ended(code: int, stdout: str, stderr: str) -> str:
    if code == 0:
        return stdout
    lines = [s for s in stderr.splitlines() if s.strip()]
    error = next((s for s in reversed(lines) if ": error: " in s or s.startswith("error: ")), None)
    if code == 2 and error is not None:
        raise ErrorLine(error)
    raise BadExit(f"exit status {code}: " + (lines[-1] if lines else "(no message)"))


def script(args, cwd=None, timeout=SUBPROCESS_TIMEOUT) -> str:
    """Run a console script of this environment as a subprocess (its name first in `args`)."""
    exe = pathlib.Path(sys.executable).parent / args[0]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    try:
        out = subprocess.run([str(exe), *map(str, args[1:])], cwd=cwd, capture_output=True, text=True,
                             timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        raise BadExit(f"no answer in {timeout} s") from err
    if out.returncode < 0:
        raise BadExit(f"killed by signal {-out.returncode}: " + first_line(out.stderr.splitlines()[-1:] and
                                                                           out.stderr.splitlines()[-1] or ""))
    return ended(out.returncode, out.stdout, out.stderr)


def train_cli(argv, cwd=None):
    from train.__main__ import main
    return cli(main, [*argv, "--no-progress"], cwd)


def eval_cli(argv, cwd=None):
    from eval.__main__ import main
    return cli(main, argv, cwd)


def prepare_cli(argv):
    from train.data.prepare import main
    return cli(main, argv)


def convert_cli(argv):
    from ccq_jax.convert.cli import convert_main
    return cli(convert_main, argv)


# ---- ops -----------------------------------------------------------------------------------------------------------

B, T, H, K, V = 1, 8, 2, 4, 4


def op_inputs(seed=0):
    rng = np.random.default_rng(seed)
    f = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    g_key = -jnp.abs(f(B, T, H, K)) * 0.3
    return {"q": f(B, T, H, K), "k": f(B, T, H, K), "v": f(B, T, H, V), "g": g_key,
            "g_head": -jnp.abs(f(B, T, H)) * 0.3, "beta": jax.nn.sigmoid(f(B, T, H)), "lam": jax.nn.sigmoid(f(B, T, H)),
            "b": jax.nn.sigmoid(f(B, T, H, K)), "w": jax.nn.sigmoid(f(B, T, H, V)), "a": f(B, T, H, K) * 0.3}


def call_op(op, x, **kwargs):
    """One op on the inputs `x` (dict; keys the op takes), keyword options `kwargs`."""
    if op == "gla":
        return ops.gla(x["q"], x["k"], x["v"], x["g"], **kwargs)
    if op == "gdn":
        return ops.gated_delta_rule(x["q"], x["k"], x["v"], x["g_head"], x["beta"], **kwargs)
    if op == "ccq_gla":
        return ops.ccq_gla(x["q"], x["k"], x["v"], x["g"], x["lam"], **kwargs)
    if op == "gdr":
        return ops.generalized_delta_rule(x["q"], x["k"], x["v"], x["g"], x["a"], **kwargs)
    if op == "kda":
        return ops.kda(x["q"], x["k"], x["v"], x["g"], x["beta"], **kwargs)
    if op == "gdn2":
        return ops.gated_delta_rule_2(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], **kwargs)
    if op == "qed":
        return ops.qed(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], x["lam"] * 0.25, **kwargs)
    return ops.ccq_query(x["q"], x["k"], x["lam"], **kwargs)


def op_run(op, change, mode, **kwargs):
    """Run `op` with `change(inputs)` applied: mode "eager", "jit" (arrays traced, options static) or "checked"."""
    def run(_scratch):
        x = change(op_inputs())
        if mode == "eager":
            return finite(call_op(op, x, **kwargs)) and None
        if mode == "jit":
            return finite(jax.jit(lambda a: call_op(op, a, **kwargs))(x)) and None
        err, out = jax.jit(ops.checked(lambda a: call_op(op, a, **kwargs)))(x)
        err.throw()
        return finite(out) and None
    return run


def finite(out) -> bool:
    jax.block_until_ready(out)
    return True


def setting(key, value):
    return lambda x: {**x, key: value(x) if callable(value) else value}


SHAPE_CASES = [  # (what, op, change, options, words)
    ("q of rank 3", "gla", setting("q", lambda x: x["q"][0]), {}, ("q", "(8, 2, 4)")),
    ("k with another batch", "gla", setting("k", lambda x: jnp.concatenate([x["k"]] * 2)), {}, ("k",)),
    ("v with another length T", "gla", setting("v", lambda x: x["v"][:, :5]), {}, ("v",)),
    ("k with another head count", "gla", setting("k", lambda x: x["k"][:, :, :1]), {}, ("k",)),
    ("g of GLA per head [B, T, H]", "gla", setting("g", lambda x: x["g_head"]), {}, ("g",)),
    ("beta [B, T]", "gdn", setting("beta", lambda x: x["beta"][..., 0]), {}, ("beta",)),
    ("lam [B, T, H, K]", "ccq_gla", setting("lam", lambda x: x["g"]), {}, ("lam",)),
    ("int32 q", "gla", setting("q", lambda x: x["q"].astype(jnp.int32)), {}, ("q", "int32")),
    ("segment_ids [B, T+1]", "gla", lambda x: x, {"segment_ids": jnp.zeros((B, T + 1), jnp.int32)},
     ("segment_ids",)),
    ("segment_ids [T]", "gla", lambda x: x, {"segment_ids": jnp.zeros((T,), jnp.int32)}, ("segment_ids",)),
    ("float segment_ids", "gla", lambda x: x, {"segment_ids": jnp.zeros((B, T), jnp.float32)}, ("segment_ids",)),
    ("segment_ids of another batch", "gla", lambda x: x, {"segment_ids": jnp.zeros((2, T), jnp.int32)},
     ("segment_ids",)),
    ("T = 0", "gla", lambda x: {k: v[:, :0] for k, v in x.items()}, {}, ("T",)),
    ("chunk_size=0", "gla", lambda x: x, {"chunk_size": 0}, ("chunk_size",)),
    ("impl='fast'", "gla", lambda x: x, {"impl": "fast"}, ("impl", "fast")),
    ("scale=-1", "gla", lambda x: x, {"scale": -1.0}, ("scale",)),
    ("initial_state [B, H, V, K+1]", "gla", lambda x: x, {"initial_state": jnp.zeros((B, H, V, K + 1))},
     ("initial_state",)),
    ("a per head [B, T, H] (generalized delta rule)", "gdr", setting("a", lambda x: x["beta"]), {}, ("a",)),
    ("g per head [B, T, H] (KDA: per channel)", "kda", setting("g", lambda x: x["g_head"]), {}, ("g",)),
    ("b [B, T, H, V+1] (GDN-2's erase gate is per key channel)", "gdn2",
     setting("b", lambda x: jnp.concatenate([x["w"], x["w"][..., :1]], -1)), {}, ("b",)),
    ("w [B, T, H, K-1] (GDN-2's write gate is per value channel)", "gdn2", setting("w", lambda x: x["w"][..., 1:]),
     {}, ("w",)),
]

RANGE_CASES = [  # value checks: clear eagerly and under ops.checked, skipped under plain jit
    ("g = 0.5 > 0 (GLA)", "gla", setting("g", lambda x: x["g"] + 0.8), {}, ("g", "0]")),
    ("g = 0.5 > 0 (gated delta rule)", "gdn", setting("g_head", lambda x: x["g_head"].at[0, 3, 1].set(0.5)), {},
     ("g", "0.5")),
    ("NaN in g", "gla", setting("g", lambda x: x["g"].at[0, 2, 0, 1].set(jnp.nan)), {}, ("g", "nan")),
    ("NaN in q at t=3", "gla", setting("q", lambda x: x["q"].at[0, 3].set(jnp.nan)), {}, ("q", "finite", "nan")),
    ("inf in v at t=3", "gla", setting("v", lambda x: x["v"].at[0, 3, 0, 0].set(jnp.inf)), {}, ("v", "finite", "inf")),
    ("inf in k (chunk form)", "gdn", setting("k", lambda x: x["k"].at[0, 2, 1, 0].set(-jnp.inf)), {"impl": "chunk"},
     ("k", "finite", "inf")),
    ("beta = 3", "gdn", setting("beta", lambda x: x["beta"].at[0, 1, 0].set(3.0)), {}, ("beta", "3")),
    ("beta = -1", "gdn", setting("beta", lambda x: x["beta"].at[0, 1, 0].set(-1.0)), {}, ("beta", "-1")),
    ("lam = 1.5", "ccq_gla", setting("lam", lambda x: x["lam"].at[0, 1, 0].set(1.5)), {}, ("lam", "1.5")),
    ("lam = -0.5", "ccq_gla", setting("lam", lambda x: x["lam"].at[0, 1, 0].set(-0.5)), {}, ("lam", "-0.5")),
    ("NaN in lam", "ccq_query", setting("lam", lambda x: x["lam"].at[0, 1, 0].set(jnp.nan)), {}, ("lam", "nan")),
    ("lam = 2 (first-order read)", "ccq_query", setting("lam", lambda x: x["lam"].at[0, 0, 0].set(2.0)), {},
     ("lam", "2")),
    ("lam = -1 (cg read)", "ccq_query", setting("lam", lambda x: x["lam"].at[0, 0, 0].set(-1.0)), {"read": "cg"},
     ("lam", "-1")),
    ("g = 0.5 > 0 (KDA)", "kda", setting("g", lambda x: x["g"].at[0, 3, 1, 2].set(0.5)), {}, ("g", "0.5")),
    ("beta = 3 (KDA)", "kda", setting("beta", lambda x: x["beta"].at[0, 1, 0].set(3.0)), {}, ("beta", "3")),
    ("b = 1.5 (GDN-2)", "gdn2", setting("b", lambda x: x["b"].at[0, 1, 0, 0].set(1.5)), {}, ("b", "1.5")),
    ("w = -0.1 (GDN-2)", "gdn2", setting("w", lambda x: x["w"].at[0, 1, 0, 0].set(-0.1)), {}, ("w", "-0.1")),
    ("NaN in a (generalized delta rule)", "gdr", setting("a", lambda x: x["a"].at[0, 2, 0, 1].set(jnp.nan)), {},
     ("a", "nan")),
    ("QED lam = 8 (x 0.25 = 2)", "qed", setting("lam", lambda x: x["lam"].at[0, 1, 0].set(8.0)), {}, ("lam", "2")),
    ("initial_stats count < 0", "ccq_query", lambda x: x,
     {"initial_stats": ops.CCQStats(jnp.zeros((B, H, K, K)), jnp.zeros((B, H, K)), -jnp.ones((B, H)))},
     ("count",)),
]


def list_as_q(mode):
    def run(_scratch):
        x = op_inputs()
        q = x["q"].tolist()
        fn = lambda q: ops.gla(q, x["k"], x["v"], x["g"])  # noqa: E731
        return finite(fn(q) if mode == "eager" else jax.jit(fn)(q)) and None
    return run


def misspelt_axis(mode):
    """`axes` naming an axis the current mesh lacks (a one-device mesh with a `data` axis)."""
    def run(_scratch):
        x = op_inputs()
        fn = lambda x: ops.gla(x["q"], x["k"], x["v"], x["g"], axes=ops.OpsAxes(batch=("dta",)))  # noqa: E731
        with jax.set_mesh(jax.make_mesh((1,), ("data",))):
            return finite(fn(x) if mode == "eager" else jax.jit(fn)(x)) and None
    return run


def agree(op, change, impls=("recurrent", "chunk", "scan"), tol=1e-4):
    """Accepted inputs: every impl gives the recurrence's output."""
    def run(_scratch):
        x = change(op_inputs())
        outs = [np.asarray(call_op(op, x, impl=impl)[0], np.float64) for impl in impls]
        ok = all(np.allclose(o, outs[0], atol=tol, rtol=tol, equal_nan=True) for o in outs[1:])
        return ok
    return run


def mixed_dtypes(_scratch):
    x = op_inputs()
    out = ops.gla(x["q"].astype(jnp.bfloat16), x["k"], x["v"], x["g"])[0]
    ref = ops.gla(x["q"].astype(jnp.bfloat16).astype(jnp.float32), x["k"], x["v"], x["g"])[0]
    return out.dtype == jnp.float32 and np.allclose(out, ref, atol=1e-5)


def float64_inputs(_scratch):
    x = op_inputs()
    out = ops.gla(*(np.asarray(x[k], np.float64) for k in ("q", "k", "v", "g")))[0]
    return bool(np.allclose(out, ops.gla(x["q"], x["k"], x["v"], x["g"])[0], atol=1e-5))


NON_MONOTONE = jnp.asarray([[3, 3, 1, 1, 1, 7, 2, 2]], jnp.int32)
SPLIT = (("recurrent", {}), ("chunk", {"chunk_size": 4}))  # chunks of 4: documents cross a chunk boundary


def ops_cases() -> list[Case]:
    cases = []
    for what, op, change, options, words in SHAPE_CASES:
        for mode in ("eager", "jit"):
            cases.append(Case("ops", f"{op}: {what} ({mode})", op_run(op, change, mode, **options), words))
    for what, op, change, options, words in RANGE_CASES:
        for mode in ("eager", "jit", "checked"):
            cases.append(Case("ops", f"{op}: {what} ({mode})", op_run(op, change, mode, **options), words,
                              jit_gap=mode == "jit"))
    cases += [Case("ops", f"gla: q a nested list ({mode})", list_as_q(mode), ("q", "list")) for mode in ("eager", "jit")]
    cases += [Case("ops", f"gla: axes naming an axis the mesh lacks ({mode})", misspelt_axis(mode), ("axes", "dta"))
              for mode in ("eager", "jit")]
    cases += [
        Case("ops", "gla: bf16 q with fp32 k, v, g (promoted to fp32)", mixed_dtypes),
        Case("ops", "gla: float64 inputs (x64 off: computed in fp32)", float64_inputs),
        Case("ops", "gla: g = -inf everywhere, 3 impls agree", agree("gla", setting("g", lambda x: x["g"] * 0 - jnp.inf))),
        Case("ops", "gla: g = -1e4 at some steps, 3 impls agree", agree(
            "gla", setting("g", lambda x: x["g"].at[:, 2:4].set(-1e4)))),
        Case("ops", "gated_delta_rule: g = -1e4 at some steps, 3 impls agree", agree(
            "gdn", setting("g_head", lambda x: x["g_head"].at[:, 5].set(-1e4)))),
        Case("ops", "gated_delta_rule: g = -inf everywhere, 3 impls agree", agree(
            "gdn", setting("g_head", lambda x: x["g_head"] * 0 - jnp.inf))),
        Case("ops", "kda: g = -1e4 at some steps and channels, 3 impls agree", agree(
            "kda", setting("g", lambda x: x["g"].at[:, 5, :, :2].set(-1e4)))),
        Case("ops", "gated_delta_rule_2: g = -inf everywhere, 3 impls agree", agree(
            "gdn2", setting("g", lambda x: x["g"] * 0 - jnp.inf))),
        Case("ops", "qed: non-monotone segment_ids, chunk = recurrent",
             lambda s: bool(np.allclose(*(call_op("qed", op_inputs(), impl=impl, segment_ids=NON_MONOTONE,
                                                  **options)[0] for impl, options in SPLIT), atol=1e-4))),
        Case("ops", "gla: non-monotone segment_ids [3,3,1,1,1,7,2,2], chunk = recurrent",
             lambda s: bool(np.allclose(*(ops.gla(*(op_inputs()[k] for k in ("q", "k", "v", "g")), impl=impl,
                                                  segment_ids=NON_MONOTONE, **options)[0]
                                          for impl, options in SPLIT), atol=1e-4))),
        Case("ops", "ccq_gla: non-monotone segment_ids, chunk = recurrent",
             lambda s: bool(np.allclose(*(call_op("ccq_gla", op_inputs(), impl=impl, segment_ids=NON_MONOTONE,
                                                  **options)[0] for impl, options in SPLIT), atol=1e-4))),
    ]
    return cases


# ---- model ---------------------------------------------------------------------------------------------------------

_MODEL = {}


def tiny_model():
    if "model" not in _MODEL:
        _MODEL["model"] = CausalLM(get_config("gla-tiny", num_hidden_layers=1, hidden_size=32, vocab_size=64),
                                   rngs=__import__("flax").nnx.Rngs(0))
    return _MODEL["model"]


def forward_with(bad, mode):
    def run(_scratch):
        from flax import nnx
        model = tiny_model()
        ids = jnp.zeros((2, 3), jnp.int32).at[1, 2].set(bad)
        out = model(ids) if mode == "eager" else nnx.jit(lambda m, x: m(x))(model, ids)
        return finite(out) and None
    return run


def checked_forward_with(bad):
    def run(_scratch):
        from flax import nnx
        graphdef, state = nnx.split(tiny_model())
        ids = jnp.zeros((2, 3), jnp.int32).at[1, 2].set(bad)
        err, out = jax.jit(ops.checked(lambda s, x: nnx.merge(graphdef, s)(x)))(state, ids)
        err.throw()
        return finite(out) and None
    return run


def generate_with(**kwargs):
    def run(_scratch):
        args = {"prompt_ids": jnp.ones((2, 3), jnp.int32), "max_new_tokens": 2, **kwargs}
        return finite(generate(tiny_model(), **args)) and None
    return run


def model_cases() -> list[Case]:
    cases = []
    for bad in (64, -1):
        what = "id = vocab_size (64)" if bad == 64 else "id = -1"
        cases += [Case("model", f"forward: {what} (eager)", forward_with(bad, "eager"), ("input_ids", "vocab_size=64")),
                  Case("model", f"forward: {what} (nnx.jit)", forward_with(bad, "jit"), ("input_ids",), jit_gap=True),
                  Case("model", f"forward: {what} (ops.checked)", checked_forward_with(bad), ("input_ids", str(bad))),
                  Case("model", f"generate: prompt {what}", generate_with(prompt_ids=jnp.full((2, 3), bad, jnp.int32)),
                       ("prompt_ids", "vocab_size=64"))]
    cases += [
        Case("model", "generate: float prompt_ids", generate_with(prompt_ids=jnp.ones((2, 3))), ("prompt_ids",)),
        Case("model", "generate: temperature 1 without rng", generate_with(temperature=1.0), ("rng",)),
        Case("model", "generate: prompt_lengths 0 and 5 for P = 3",
             generate_with(prompt_lengths=jnp.asarray([0, 5])), ("prompt_lengths",)),
        Case("model", "generate: top_p = 1.5", generate_with(top_p=1.5, temperature=1.0, rng=jax.random.key(0)),
             ("top_p",)),
        Case("model", "generate: max_new_tokens = -1", generate_with(max_new_tokens=-1), ("max_new_tokens",)),
    ]
    return cases


# ---- config --------------------------------------------------------------------------------------------------------


def tiny_run(**changes) -> dict:
    """A ccq-train config dict of one 32-wide GLA layer on MQAR for 4 steps (checkpoints at 2 and 4)."""
    base = {"name": "tiny", "model": "gla-tiny",  # the byte tokenizer's 384 ids: ccq-eval ppl reads text with it
            "model_overrides": {"num_hidden_layers": 1, "hidden_size": 32, "vocab_size": 384},
            "data": {"source": "mqar", "seq_len": 32, "batch_size": 8, "prefetch_batches": 0,
                     "mqar": {"vocab_size": 64, "num_kv_pairs": 4, "num_examples": 512}},
            "optim": {"lr": 3e-3, "warmup_steps": 1},
            "steps": 4, "log_every": 1, "eval_batches": 0, "checkpoint_every": 2, "async_checkpoint": False}
    for key, value in changes.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return base


def write(path: pathlib.Path, text) -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return path


def train_with(*sets, config=None, yaml_text=None, only=None):
    """ccq-train on the tiny config (or `config` / a YAML of `yaml_text`) with `--set`s, in a fresh workdir."""
    def run(scratch):
        if yaml_text is not None:
            path = write(scratch / "cfg" / f"{abs(hash(yaml_text))}.yaml", yaml_text)
        else:
            path = config or write(scratch / "cfg" / "tiny.yaml", yaml.safe_dump(tiny_run()))
        workdir = pathlib.Path(tempfile.mkdtemp(dir=scratch)) / "run"
        argv = ["--config", str(path), "--workdir", str(workdir)]
        argv += [a for s in sets for a in ("--set", s)] + (["--only", only] if only else [])
        train_cli(argv)
        return None
    return run


def config_cases() -> list[Case]:
    tiny = yaml.safe_dump(tiny_run())
    return [
        Case("config", "--set stepz=10 (unknown key)", train_with("stepz=10"), ("stepz", "steps")),
        Case("config", "YAML with an unknown key 'optimizer'", train_with(yaml_text=tiny + "optimizer: {lr: 1}\n"),
             ("optimizer",)),
        Case("config", "--set model.hiden_size=64 (unknown model key)", train_with("model.hiden_size=64"),
             ("hiden_size",)),
        Case("config", "--set steps=abc", train_with("steps=abc"), ("steps", "abc")),
        Case("config", "--set steps=1.5", train_with("steps=1.5"), ("steps", "1.5")),
        Case("config", "--set optim.lr=abc", train_with("optim.lr=abc"), ("lr", "abc")),
        Case("config", "YAML steps: \"60\" (a string)", train_with(yaml_text=tiny + "steps: '60'\n"), ("steps", "60")),
        Case("config", "--set steps=-1", train_with("steps=-1"), ("steps", "-1")),
        Case("config", "--set optim.lr=-1", train_with("optim.lr=-1"), ("lr",)),
        Case("config", "--set data.batch_size=0", train_with("data.batch_size=0"), ("batch_size",)),
        Case("config", "--set model.num_heads=3 (32 wide)", train_with("model.num_heads=3"), ("num_heads",)),
        Case("config", "--set data.seq_len=4 (MQAR needs more)", train_with("data.seq_len=4"), ("seq_len",)),
        Case("config", "--set model=gla-tni (preset typo)", train_with("model=gla-tni"), ("gla-tni",)),
        Case("config", "--config mqar-tyni (named run typo)", train_with(config="mqar-tyni"), ("mqar-tyni",)),
        Case("config", "--only gla-tni (no such run)", train_with(config="mqar-tiny", only="gla-tni"), ("gla-tni",)),
        Case("config", "YAML holding a list", train_with(yaml_text="- steps: 4\n- steps: 8\n"), ("list",)),
        Case("config", "--set steps (no '=')", train_with("steps"), ("steps", "=")),
        Case("config", "--set mesh.data=3 on one device", train_with("mesh.data=3"), ("mesh",)),
        Case("config", "--config nowhere.yaml (missing)", lambda s: train_with(config=s / "nowhere.yaml")(s),
             ("nowhere.yaml",)),
        Case("config", "YAML with a tab in its indentation", train_with(yaml_text="optim:\n\tlr: 1\n"), ("yaml",)),
        Case("config", "empty YAML", train_with(yaml_text=""), ("yaml", "no settings")),
        Case("config", "--set optim.warmup_steps=10 with steps=4", train_with("optim.warmup_steps=10"),
             ("warmup_steps",)),
        Case("config", "--set on_nan=ignore", train_with("on_nan=ignore"), ("on_nan", "ignore")),
        Case("config", "--set checks=always", train_with("checks=always"), ("checks", "always")),
        Case("config", "--set model.vocab_size=32 below MQAR's 64 ids", train_with("model.vocab_size=32"),
             ("model.vocab_size", "32")),
    ]


# ---- checkpoints ---------------------------------------------------------------------------------------------------


def trained(scratch: pathlib.Path) -> pathlib.Path:
    """The tiny run's workdir (steps 2 and 4 saved), trained once per scratch folder; its YAML beside it."""
    workdir = scratch / "trained" / "run"
    if not (workdir / "summary.json").is_file():
        config = write(scratch / "trained" / "tiny.yaml", yaml.safe_dump(tiny_run()))
        train_cli(["--config", str(config), "--workdir", str(workdir)])
    return workdir


def copy_of_run(scratch: pathlib.Path) -> pathlib.Path:
    workdir = pathlib.Path(tempfile.mkdtemp(dir=scratch)) / "run"
    shutil.copytree(trained(scratch), workdir)
    return workdir


def largest_array_file(step_dir: pathlib.Path) -> pathlib.Path:
    return max((p for p in (step_dir / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def resume(workdir, *sets):
    config = workdir.parent.parent / "trained" / "tiny.yaml"
    config = config if config.is_file() else next(workdir.parents[1].glob("trained/tiny.yaml"))
    return train_cli(["--config", str(config), "--workdir", str(workdir), *[a for s in sets for a in ("--set", s)]])


def with_copy(damage: Callable[[pathlib.Path], None], then: Callable[[pathlib.Path], bool | None]):
    def run(scratch):
        workdir = copy_of_run(scratch)
        damage(workdir)
        return then(workdir)
    return run


def random_bytes(workdir):
    path = largest_array_file(workdir / "checkpoints" / "4")
    data = bytearray(path.read_bytes())
    n = min(4096, len(data))
    data[:n] = np.random.default_rng(0).bytes(n)
    path.write_bytes(bytes(data))


def truncate(workdir):
    path = largest_array_file(workdir / "checkpoints" / "4")
    path.write_bytes(path.read_bytes()[:100])


def break_json(workdir):
    for path in (workdir / "checkpoints" / "4").rglob("*"):
        if path.is_file() and path.name in ("metadata", "_CHECKPOINT_METADATA") and path.parent.name == "config":
            path.write_text(path.read_text()[:-5])
            return
    raise RuntimeError(f"no config metadata under {workdir / 'checkpoints' / '4'}")


def drop_last_step(workdir):
    """As a kill -9 right after step 4's metrics rows, before its checkpoint: metrics hold rows 1-4, step 2 saved."""
    shutil.rmtree(workdir / "checkpoints" / "4")
    (workdir / "summary.json").unlink()


def resumed_metrics_are_whole(workdir):
    resume(workdir)
    steps = [json.loads(line)["step"] for line in (workdir / "metrics.jsonl").read_text().splitlines() if line]
    return steps == [1, 2, 3, 4]


def from_pretrained(path_of, **kwargs):
    def run(scratch):
        return finite(CausalLM.from_pretrained(path_of(scratch), **kwargs)(jnp.ones((1, 4), jnp.int32))) and None
    return run


def eval_of_run(relative: bool):
    """ccq-eval ppl on a 2 KB text file with the tiny run's checkpoint (given relative to the working directory)."""
    def run(scratch):
        workdir = trained(scratch)
        data = write(scratch / "text" / "small.txt", "the quick brown fox jumps over the lazy dog. " * 40)
        checkpoint = os.path.relpath(workdir, scratch) if relative else str(workdir)
        out = eval_cli(["ppl", "--checkpoint", checkpoint, "--data", str(data), "--tokenizer", "byte",
                        "--window", "32", "--out", str(scratch / "eval_out"), "--no-progress"], cwd=scratch)
        return None if out is not None else False
    return run


def checkpoint_cases() -> list[Case]:
    return [
        Case("checkpoint", "re-run a finished run's command (restores step 4)", lambda s: resume(copy_of_run(s)) and None),
        Case("checkpoint", "resume after a kill between step 4's metrics and its checkpoint (metrics rows 1-4)",
             with_copy(drop_last_step, resumed_metrics_are_whole)),
        Case("checkpoint", "4 KB of random bytes in an array file of step 4, then resume",
             with_copy(random_bytes, resume), ("step 4", "damaged", "previous kept step is 2")),
        Case("checkpoint", "an array file of step 4 cut to 100 bytes, then from_pretrained",
             with_copy(truncate, lambda w: from_pretrained(lambda s: w)(None)), ("step 4", "truncated")),
        Case("checkpoint", "step 4's config metadata JSON cut short, then from_pretrained",
             with_copy(break_json, lambda w: from_pretrained(lambda s: w)(None)), ("step 4",)),
        Case("checkpoint", "another model (hidden_size=64) into the run's workdir",
             with_copy(lambda w: None, lambda w: resume(w, "model_overrides.hidden_size=64")), ("hidden_size",)),
        Case("checkpoint", "another run's settings (seed=1) into the workdir",
             with_copy(lambda w: None, lambda w: resume(w, "seed=1")), ("seed: 0 -> 1",)),
        Case("checkpoint", "a finished run asked for more steps (steps=8)",
             with_copy(lambda w: None, lambda w: resume(w, "steps=8")), ("steps",)),
        Case("checkpoint", "from_pretrained(run, step=3) (not saved)", from_pretrained(trained, step=3), ("step", "3")),
        Case("checkpoint", "ccq-eval --checkpoint RUN --step 3 (not saved)",
             lambda s: eval_cli(["ppl", "--checkpoint", str(trained(s)), "--step", "3", "--data",
                                 str(write(s / "text" / "small.txt", "abc " * 100)), "--no-progress",
                                 "--out", str(s / "eval_out")]), ("step", "3")),
        Case("checkpoint", "from_pretrained of a folder that is no run", from_pretrained(lambda s: s / "text"),
             ("text",)),
        Case("checkpoint", "ccq-train --workdir under a file (not writable)",
             lambda s: train_with()(s) if False else train_cli(
                 ["--config", str(write(s / "cfg" / "tiny.yaml", yaml.safe_dump(tiny_run()))),
                  "--workdir", str(write(s / "afile", "") / "run")]), ("workdir", "afile")),
        Case("checkpoint", "on_nan=stop with lr=1e30 (ccq-train, a subprocess)",
             lambda s: script(["ccq-train", "--config", write(s / "cfg" / "tiny.yaml", yaml.safe_dump(tiny_run())),
                               "--workdir", s / "nan" / "run", "--no-progress", "--set", "optim.lr=1e30",
                               "--set", "optim.grad_clip=0", "--set", "checkpoint_every=0"]), ("step", "loss")),
        Case("checkpoint", "ccq-eval ppl --checkpoint with a relative path", eval_of_run(relative=True)),
        Case("checkpoint", "from_pretrained with a relative path",
             lambda s: from_pretrained(lambda _: os.path.relpath(trained(s)))(s)),
        Case("checkpoint", "ccq-convert export RUN OUT, relative paths",
             lambda s: convert_cli(["export", os.path.relpath(trained(s)), os.path.relpath(s / "exported")])
             and None),
    ]


# ---- data ----------------------------------------------------------------------------------------------------------

TEXT = "the quick brown fox jumps over the lazy dog. " * 40


def text_run(paths, source="text", **data) -> str:
    """A ccq-train YAML of the tiny model on text files (byte tokenizer, 2 steps, nothing saved)."""
    return yaml.safe_dump(tiny_run(data={"source": source, "paths": [str(p) for p in paths], "batch_size": 2,
                                         **data}, steps=2, checkpoint_every=0, optim={"warmup_steps": 0}))


def train_on(files: dict[str, str | bytes], source="text", paths=None, **data):
    """ccq-train on the files {name: content} written in a fresh folder (or on `paths`, names in that folder)."""
    def run(scratch):
        folder = pathlib.Path(tempfile.mkdtemp(dir=scratch))
        for name, content in files.items():
            write(folder / name, content)
        chosen = [folder / p for p in (paths or files)]
        return train_with(yaml_text=text_run(chosen, source, **data))(scratch)
    return run


def prepare_on(files: dict[str, str | bytes], source="text", paths=None):
    def run(scratch):
        folder = pathlib.Path(tempfile.mkdtemp(dir=scratch))
        for name, content in files.items():
            write(folder / name, content)
        prepare_cli(["--source", source, "--paths", *[str(folder / p) for p in (paths or files)],
                     "--output", str(folder / "shards")])
        return None
    return run


def eval_on(data_of, *extra, tokenizer="byte"):
    """ccq-eval ppl of a random gla-tiny on `data_of(scratch)` (a path string)."""
    def run(scratch):
        return eval_cli(["ppl", "--preset", "gla-tiny", "--set", "num_hidden_layers=1", "--data", data_of(scratch),
                         "--tokenizer", tokenizer, "--window", "32", "--limit", "2", "--no-progress",
                         "--out", str(scratch / "eval_out"), *extra]) and None
    return run


LATIN1 = "caf\xe9 au lait ".encode("latin-1") * 20


def data_cases() -> list[Case]:
    return [
        Case("data", "ccq-train on a missing .txt path", train_on({}, paths=["nowhere.txt"]), ("nowhere.txt",)),
        Case("data", "ccq-train on a glob matching nothing", train_on({}, paths=["*.txt"]), ("*.txt",)),
        Case("data", "ccq-train on an empty directory", train_on({"empty/.keep": ""}, paths=["empty"]), ("empty",)),
        Case("data", "ccq-train on an empty .txt", train_on({"empty.txt": ""}), ("empty.txt", "no document")),
        Case("data", "ccq-train on .txt files holding blank lines only (empty docs)",
             train_on({"a.txt": "\n\n", "b.txt": "  \n"}, text_split="blank_line"), ("no document",)),
        Case("data", "ccq-train on an empty .jsonl", train_on({"e.jsonl": ""}, source="jsonl"), ("e.jsonl",)),
        Case("data", "ccq-train on .jsonl records with empty text (empty docs)", train_on(
            {"e.jsonl": '{"text": ""}\n{"text": ""}\n'}, source="jsonl"), ("e.jsonl",)),
        Case("data", "ccq-train on .jsonl without the text field", train_on(
            {"d.jsonl": '{"body": "x"}\n'}, source="jsonl"), ("d.jsonl", "text")),
        Case("data", "ccq-train on .jsonl with a number as text", train_on(
            {"d.jsonl": '{"text": 5}\n'}, source="jsonl"), ("d.jsonl", "text")),
        Case("data", "ccq-train on .jsonl with a broken line", train_on(
            {"d.jsonl": '{"text": "a"}\n{"text": \n'}, source="jsonl"), ("d.jsonl",)),
        Case("data", "ccq-train with a missing tokenizer.json", train_on(
            {"a.txt": TEXT}, tokenizer="nowhere/tokenizer.json"), ("tokenizer",)),
        Case("data", "ccq-train with a junk tokenizer.json", lambda s: train_on(
            {"a.txt": TEXT}, tokenizer=str(write(s / "junk" / "tokenizer.json", "{not json")))(s),
             ("tokenizer.json",)),
        Case("data", "ccq-train on a latin-1 .txt (not UTF-8)", train_on({"latin1.txt": LATIN1}),
             ("latin1.txt", "UTF-8")),
        Case("data", "ccq-prepare-data on a latin-1 .txt", prepare_on({"latin1.txt": LATIN1}), ("latin1.txt", "UTF-8")),
        Case("data", "ccq-prepare-data on an empty .txt", prepare_on({"empty.txt": ""}), ("empty.txt", "no document")),
        Case("data", "ccq-prepare-data on a missing path", prepare_on({}, paths=["nowhere.txt"]), ("nowhere.txt",)),
        Case("data", "ccq-eval ppl --data on a latin-1 .txt",
             eval_on(lambda s: str(write(s / "d" / "latin1.txt", LATIN1))), ("latin1.txt", "UTF-8")),
        Case("data", "ccq-eval ppl --data on a missing file", eval_on(lambda s: str(s / "nowhere.txt")),
             ("nowhere.txt",)),
        Case("data", "ccq-eval ppl --data data/wiki.txt (mistyped, no hub lookup)",
             eval_on(lambda s: "data/wiki.txt"), ("data/wiki.txt", "not")),
        Case("data", "ccq-eval ppl --data on an empty file", eval_on(lambda s: str(write(s / "d" / "empty.txt", ""))),
             ("empty.txt",)),
        Case("data", "ccq-eval ppl --window 0", eval_on(lambda s: str(write(s / "d" / "a.txt", TEXT)),
                                                        "--window", "0"), ("window",)),
        Case("data", "ccq-eval ppl --stride 40 above --window 32", eval_on(
            lambda s: str(write(s / "d" / "a.txt", TEXT)), "--stride", "40"), ("stride",)),
        Case("data", "ccq-eval ppl --preset gla-tni (typo)",
             lambda s: eval_cli(["ppl", "--preset", "gla-tni", "--data", str(write(s / "d" / "a.txt", TEXT))]),
             ("gla-tni",)),
        Case("data", "ccq-eval ppl on a 2 KB .txt (a random gla-tiny)",
             eval_on(lambda s: str(write(s / "d" / "a.txt", TEXT)))),
    ]


# ---- CLI user errors -----------------------------------------------------------------------------------------------


def cli_cases() -> list[Case]:
    return [
        Case("cli", "ccq-eval pll (mistyped command)", lambda s: eval_cli(["pll"]), ("pll",)),
        Case("cli", "ccq-eval ppl without --data", lambda s: eval_cli(["ppl", "--preset", "gla-tiny"]), ("--data",)),
        Case("cli", "ccq-train --workdir with no value", lambda s: train_cli(["--workdir"]), ("--workdir",)),
        Case("cli", "ccq-prepare-data without --output", lambda s: prepare_cli(["--source", "text"]), ("--output",)),
        Case("cli", "ccq-convert to-fla on a missing folder",
             lambda s: convert_cli(["to-fla", str(s / "nowhere"), str(s / "out")]), ("nowhere",)),
        Case("cli", "ccq-convert export RUN OUT --format onnx",
             lambda s: convert_cli(["export", str(trained(s)), str(s / "x"), "--format", "onnx"]), ("--format", "onnx")),
        Case("cli", "ccq-convert export of a folder that is no run",
             lambda s: convert_cli(["export", str(write(s / "norun" / "a.txt", "").parent), str(s / "x2")]),
             ("norun",)),
    ]


# ---- the table -----------------------------------------------------------------------------------------------------

CASES = {"ops": ops_cases, "model": model_cases, "config": config_cases, "checkpoint": checkpoint_cases,
         "data": data_cases, "cli": cli_cases}
NOT_RERUN = ("kill -9 during a save and SIGTERM (timing-dependent; tests/train/test_resume_guard.py), a full disk "
             "(needs a small tmpfs; the free-space check is tests/train/test_run_end.py's) and a read-only mount")


def all_cases(areas=AREAS) -> list[Case]:
    return [case for area in areas for case in CASES[area]()]


def counts(rows) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in rows) for v in VERDICTS}


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows, seconds: float) -> str:
    n = counts(rows)
    review = ", ".join(f"{REVIEW[v]} {v}" for v in ("clear", "silent", "crash", "correct"))
    lines = [
        "# Bad inputs: what is tried, what the user gets",
        "",
        f"A re-run of the bad-input table of the first-week review (issue 53), on {datetime.date.today():%Y-%m-%d},"
        f" by `scripts/bad_inputs.py` ({len(rows)} cases, {seconds:.0f} s on a CPU):",
        "",
        "    JAX_PLATFORMS=cpu .venv/bin/python scripts/bad_inputs.py   # rewrites this file",
        "",
        "Each case is classified automatically: **clear** (a ValueError, a failed checkify check or a one-line "
        "`error:` with exit status 2 that names the argument or file: the script checks the words), **silent** (no "
        "error where one was due, or a wrong result), **crash** (another exception, an error without its words, a "
        "non-zero exit without an `error:` line, a signal, a timeout), **correct** (accepted and right). "
        f"Value checks are skipped under plain `jax.jit` by design; those rows are **{JIT_GAP}**: "
        "`ccq_jax.ops.checked(fn)` or `TrainConfig.checks=\"checkify\"` runs them inside the compiled program "
        "(the `checked` rows).",
        "",
        f"**Counts: {len(rows)} tried: {n['clear']} clear, {n['correct']} correct, {n[JIT_GAP]} silent in the "
        f"documented jit gap, {n['silent']} silent otherwise, {n['crash']} crash.** The review: {review} of 144 "
        "(its 22 silent: 11 in the jit gap).",
        "",
        f"Not re-run here: {NOT_RERUN}.",
    ]
    open_rows = [r for r in rows if r.verdict in ("silent", "crash")]
    if open_rows:
        lines += ["", "Open (outside the jit gap):", ""]
        lines += [f"- {r.case.area}: {r.case.tried}: {r.got} ({r.verdict}){OPEN_NOTES.get(r.case.tried, '')}"
                  for r in open_rows]
    lines += ["", "| Area | What was tried | What the user gets | Verdict |", "|---|---|---|---|"]
    lines += [f"| {r.case.area} | {cell(r.case.tried)} | {cell(r.got)} | {r.verdict} |" for r in rows]
    return "\n".join(lines) + "\n"


OPEN_NOTES = {}  # why an open row is open: {tried: ": the reason"}, printed after it


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--area", action="append", choices=AREAS, help="only these areas (repeatable)")
    parser.add_argument("--no-write", action="store_true", help=f"print the table, leave {DOC.name} as it is")
    args = parser.parse_args(argv)
    start = datetime.datetime.now()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as scratch:
        for case in all_cases(args.area or AREAS):
            rows.append(verdict(case, pathlib.Path(scratch)))
            print(f"{rows[-1].verdict:>8.8s}  {case.area:<10s} {case.tried}: {rows[-1].got}", flush=True)
    text = markdown(rows, (datetime.datetime.now() - start).total_seconds())
    if not args.no_write:
        DOC.write_text(text)
    print(json.dumps(counts(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
