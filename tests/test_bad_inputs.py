"""The bad-input table (scripts/bad_inputs.py, docs/bad-inputs.md) cannot rot silently: a representative subset of
its cases (the ops' shape, dtype and range errors eagerly and under `ops.checked`, the model's token ids, the config
errors through ccq-train) still ends in a clear error or a correct result, none silent or crashing outside the
documented jit gap and the rows the doc lists as open."""

import importlib.util
import pathlib

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "bad_inputs.py"


def _script():
    spec = importlib.util.spec_from_file_location("bad_inputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bad_inputs = _script()
SUBSET = [c for c in bad_inputs.all_cases(("ops", "model", "config")) if not c.jit_gap and "(jit)" not in c.tried
          and c.tried not in bad_inputs.OPEN_NOTES]


def test_the_subset_covers_each_kind_of_case():
    tried = " ".join(c.tried for c in SUBSET)
    assert len(SUBSET) > 60 and all(w in tried for w in ("(eager)", "(checked)", "forward:", "generate:", "--set"))


@pytest.mark.parametrize("case", SUBSET, ids=lambda c: c.tried)
def test_no_case_is_silent_or_crashes(case, tmp_path):
    row = bad_inputs.verdict(case, tmp_path)
    assert row.verdict in ("clear", "correct"), f"{row.verdict}: {row.got}"
