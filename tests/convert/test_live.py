"""Live parity against fla in PyTorch, on a CPU: `ccq-parity` end to end on tiny presets, CCQ included.

Needs a Python with torch, transformers and fla (CI has none, so these tests are skipped there):
set CCQ_TORCH_PYTHON to its interpreter (e.g. a Python 3.11 venv with the CPU torch wheel), or run
them in a Python that has torch and fla itself. Each case saves a random preset with
`save_fla_checkpoint`, loads it with fla's `AutoModelForCausalLM.from_pretrained` (the CCQ
reference for CCQ presets) and compares logits: the way back of the conversion.
"""

import json

import pytest

from ccq_jax.convert.cli import parity_main
from tests.builders import TORCH_PYTHON

pytestmark = pytest.mark.skipif(TORCH_PYTHON is None, reason="set CCQ_TORCH_PYTHON to a Python with torch and fla")


@pytest.mark.parametrize("preset, overrides", [
    ("gla-tiny", ["use_short_conv=true", "num_kv_heads=2"]),
    ("gdn-tiny", ["num_v_heads=4"]),
    ("ccq-gla-tiny", []),
    ("ccq-gdn-tiny", ["tie_word_embeddings=true"]),
    ("ccq-gla-tiny", ["ccq.lambda_max=0.5", "ccq.gate_bias_init=1.0"]),  # the reference's lambda_max
    ("kda-tiny", ["num_v_heads=4", "allow_neg_eigval=true"]),
    ("kda-tiny", ["safe_gate=true", "lower_bound=-5.0", "use_short_conv=false"]),
    ("mamba2-tiny", []),  # fla's torch_forward on a CPU (its prefill tiles B and C over groups: one group here)
    # hybrids: fla's Attention with the flash_attn_func stand-in of ccq_jax.torch_reference.cpu (full and windowed)
    ("gla-hybrid-tiny", ["use_short_conv=true"]),
    ("gdn-hybrid-tiny", ["num_v_heads=4"]),
    ("ccq-gdn-tiny", ['attn={"layers": [1], "num_heads": 4, "num_kv_heads": 1, "qkv_bias": true}']),
])
def test_ccq_parity_on_a_cpu(preset, overrides, tmp_path, capsys):
    sets = [x for o in ["initializer_range=0.1", *overrides] for x in ("--set", o)]
    parity_main(["--preset", preset, "--torch-python", TORCH_PYTHON, "--device", "cpu", "--seq-len", "80",
                 "--save-dir", str(tmp_path / "model"), "--json", str(tmp_path / "parity.json"),
                 "--max-rel-rms", "1e-4", *sets])
    record = json.loads((tmp_path / "parity.json").read_text())
    assert record["torch_side"]["device"] == "cpu" and record["metrics"]["top1_agreement"] == 1.0
    assert "relative RMS" in capsys.readouterr().out


def test_bf16_parity_reports_what_half_precision_costs_each_side(tmp_path):
    parity_main(["--preset", "gla-tiny", "--torch-python", TORCH_PYTHON, "--device", "cpu", "--seq-len", "64",
                 "--dtype", "bfloat16", "--set", "initializer_range=0.1", "--json", str(tmp_path / "parity.json")])
    record = json.loads((tmp_path / "parity.json").read_text())
    against = record["against_our_fp32"]
    # bf16 moves both sides away from the fp32 logits by about as much as they differ from each other
    for side in ("ours", "torch"):
        assert 1e-3 < against[side]["rel_rms"] < 0.1
    assert record["metrics"]["rel_rms"] < 2 * max(a["rel_rms"] for a in against.values())
