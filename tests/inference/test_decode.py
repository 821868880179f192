"""Prefill (chunked) + token-by-token decoding reproduce the full forward, for every family with and without CCQ."""

import jax
import jax.numpy as jnp
import pytest

from ccq_jax.inference import cache_nbytes, decode_step, init_cache
from tests.builders import build, forward, MODEL_CASES as CASES, prefill_then_decode, rel_rms, token_ids

T, PROMPT = 18, 11


LINEAR = [c for c in CASES if c != "transformer"]


@pytest.mark.parametrize("case,impls", [(c, {}) for c in CASES] + [(c, {"kernel.decode_impl": "pallas"}) for c in LINEAR]
                         + [(c, {"kernel.head_impl": "pallas"}) for c in ("transformer", "ccq-gla")]
                         + [("gla", {"kernel.decode_impl": "pallas", "kernel.interpret": True})]  # interpret: the step only
                         + [(c, {"ccq.read": "cg", "ccq.iterations": 3, "ccq.lambda_max": 6.0})
                            for c in ("ccq-gla", "ccq-gdn")]
                         + [("ccq-gla", {"ccq.read": "neumann", "ccq.terms": 2})])
def test_prefill_then_decode_reproduces_the_full_forward(case, impls):
    """Row 0 packs two documents (the second continues through decoding); rows 1 and 2 are one document each.
    kernel.decode_impl="pallas": the steps on the one-token kernels (`pallas_kernels.recurrent_step`, interpreted here);
    kernel.head_impl="pallas": their LM head on the row-matmul kernel (`pallas_kernels.row_matmul`)."""
    name, overrides = CASES[case]
    model = build(name, dict(overrides, **impls))
    ids = token_ids((3, T), seed=5)
    segments = jnp.asarray([[0] * 4 + [1] * (T - 4), [3] * T, [0] * T], jnp.int32)
    full = forward(model, ids, segments)
    assert rel_rms(prefill_then_decode(model, ids, segments, PROMPT), full) < 1e-5  # measured ~4e-7


@pytest.mark.parametrize("case", list(CASES))
def test_linear_caches_do_not_grow_with_the_context(case):
    model = build(*CASES[case])
    short, long = (cache_nbytes(init_cache(model, 2, n)) for n in (16, 4096))
    if case == "transformer":
        assert long == pytest.approx(short * 4096 / 16, rel=0.01)
    else:
        assert long == short


def test_decode_step_keeps_the_cache_layout():
    model = build(*CASES["ccq-gla"])
    cache = init_cache(model, 3, 8)
    _, new = decode_step(model, token_ids((3,)), cache)
    shapes = lambda c: jax.tree.map(lambda x: (x.shape, x.dtype), c)
    assert shapes(new) == shapes(cache)
    assert float(new[0].stats.count[0, 0]) == 1.0  # the token entered the CCQ statistics


def test_decode_step_checks_its_tokens():
    model = build("gla-tiny")
    with pytest.raises(ValueError, match=r"tokens: expected integer token ids \[B\], got int32 \(2, 1\)"):
        decode_step(model, token_ids((2, 1)), init_cache(model, 2, 4))
