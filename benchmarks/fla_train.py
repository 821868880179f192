"""fla's training step on fla's model of one of our plain presets, hybrids included: tokens/s and peak memory.

    python3 benchmarks/fla_train.py --presets gdn-hybrid-1.3b gdn-1.3b --out fla_train.jsonl   # GPU, torch and fla

The anchor of benchmarks/train_throughput.py's rows for presets that fla's reference script (`fla_baseline.py`,
GLA-1.3B and GDN-1.3B only) does not build. The model comes from our preset's config (`ccq_jax.convert.config_to_fla`,
the mapping the checkpoint conversion uses, as benchmarks/inference_fla.py builds it) with fla's initialisation, in
bf16 on CUDA, trained as `fla_baseline.py` trains its models: fused AdamW (lr 1e-4), B x T random ids with
labels = ids, `--warmup` steps, then `--steps` timed ones; tokens/s = B T steps / seconds, peak
`torch.cuda.max_memory_allocated`. A preset with attention layers runs fla's `Attention` on flash-attn where that
is installed, else on PyTorch's fused attention kernels (`ccq_jax.torch_reference.attention`, only the fused
backends allowed: a call none of them can run is an error, not a slow fallback); each row says which. CCQ presets
are refused by name: fla has no CCQ (the anchor of a CCQ preset is its backbone's row).
"""

import argparse
import importlib.metadata
import importlib.util
import time

from benchmarks import records
from ccq_jax.convert.config import config_to_fla
from ccq_jax.models import get_config


def train_row(preset: str, batch: int, seq_len: int, warmup: int, steps: int) -> dict:
    """Build fla's model of `preset`, train `warmup` + `steps` steps, and return the row of the timed ones."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from ccq_jax.torch_reference.attention import fla_attention

    config = config_to_fla(get_config(preset))
    backend, context = fla_attention(config)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with context:
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
        model = model.to("cuda", torch.bfloat16).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        ids = torch.randint(0, model.config.vocab_size, (batch, seq_len), device="cuda")
        for step in range(warmup + steps):
            if step == warmup:
                torch.cuda.synchronize()
                start = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / steps
    row = {"side": "fla", "preset": preset, "batch": batch, "seq_len": seq_len, "steps": steps,
           "params_M": sum(p.numel() for p in model.parameters()) / 1e6, "step_ms": 1e3 * seconds,
           "tokens_per_s": batch * seq_len / seconds, "peak_GiB": torch.cuda.max_memory_allocated() / 2**30,
           "attention": backend, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "fla": importlib.metadata.version("flash-linear-attention"),
           "triton": importlib.metadata.version("triton")}
    del model, optimizer
    torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="+", required=True, help="our plain presets (no ccq-*), e.g. gdn-hybrid-1.3b")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", help="JSON lines, appended as each preset is measured")
    a = p.parse_args(argv)
    for name, value in [("--batch", a.batch), ("--seq-len", a.seq_len), ("--warmup", a.warmup), ("--steps", a.steps)]:
        if value < 1:
            p.error(f"{name}: expected >= 1, got {value}")
    for preset in a.presets:
        if preset.startswith("ccq-"):
            p.error(f"--presets: fla has no CCQ; time the backbone {preset.removeprefix('ccq-')!r}, not {preset!r}")
        try:
            config_to_fla(get_config(preset))
        except ValueError as e:
            p.error(f"--presets: {e}")
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("fla") is None:
        p.error("needs torch and fla (flash-linear-attention) installed")
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU (fla's kernels are Triton)")
    for preset in a.presets:
        records.append(a.out, records.show([train_row(preset, a.batch, a.seq_len, a.warmup, a.steps)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
