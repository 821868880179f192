"""Our logits on the golden fla / CCQ-reference models (tests/fixtures/fla) equal PyTorch's, without torch.

The goldens come from `scripts/make_fla_goldens.py`: fla-initialised models and models written
by `save_fla_checkpoint`, with logits computed by fla (and the PyTorch CCQ reference) on a CPU.
"""

import json

import numpy as np
import pytest

from ccq_jax.convert import load_fla_checkpoint
from tests.builders import FIXTURES, forward, GOLDENS, rel_rms

CCQ_GOLDENS = [c for c in GOLDENS if json.loads((FIXTURES / c / "config.json").read_text()).get("ccq")]


def _golden(case):
    return np.load(FIXTURES / case / "input_ids.npy"), np.load(FIXTURES / case / "logits.npy")


def test_every_kind_of_golden_is_there():
    assert {"gla", "gdn", "ccq-gla", "ccq-gdn", "gla-from-jax", "gdn-from-jax", "kda-gva",
            "kda-bounded-from-jax", "gla-hybrid", "gdn-hybrid-window", "gla-hybrid-from-jax", "gdn-hybrid-from-jax",
            "mamba2", "mamba2-from-jax"} <= set(GOLDENS)


@pytest.mark.parametrize("case", GOLDENS)
def test_our_logits_match_pytorch(case):
    _, model = load_fla_checkpoint(FIXTURES / case, **{"kernel.chunk_size": 16})  # 40 tokens: three chunks, one partial
    ids, expected = _golden(case)
    assert rel_rms(forward(model, ids), expected) < 1e-4


@pytest.mark.parametrize("case", CCQ_GOLDENS)
def test_the_ccq_goldens_depend_on_the_ccq_read(case):
    """Without the read our logits are far from the golden ones, so the golden does test the read."""
    _, model = load_fla_checkpoint(FIXTURES / case, **{"kernel.impl": "recurrent", "ccq.mode": "off"})
    ids, expected = _golden(case)
    assert rel_rms(forward(model, ids), expected) > 1e-3
