"""fla's side of benchmarks/inference.py: its model of one of our plain presets, in bf16 on CUDA.

fla builds the model from our preset's config (`ccq_jax.convert.config_to_fla`, the mapping the checkpoint
conversion uses) with its own initialisation; a hybrid's attention layers run on flash-attn where it is installed,
else on PyTorch's fused attention kernels (`ccq_jax.torch_reference.attention.fla_attention`; each record says
which). Timed, each the best of `repeats` after one warm-up run (`benchmarks.timing.best_seconds`, the GPU
synchronised after each run):
- `prefill` B:P: one forward of the prompt with `use_cache=True` (the cache fla's generation continues from);
- `decode` B:P (`decode, HF generate`): `model.generate` of `tokens` new tokens greedily (all of them: no early
  end), minus the prefill of the same prompt, per token;
- `decode` B:P (`decode`, the row ours is compared with): a plain loop of `tokens` forwards of one token each
  over fla's cache, without `generate`'s overhead, per token.
"""

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.timing import best_seconds
from ccq_jax.convert.config import config_to_fla
from ccq_jax.models import get_config
from ccq_jax.torch_reference.attention import fla_attention
from ccq_jax.torch_reference.models import register


def _timed(fn, repeats: int) -> float:
    return best_seconds(fn, repeats, wait=lambda _: torch.cuda.synchronize())


def _loop(model, ids, tokens: int):
    out = model(ids, use_cache=True)
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(tokens):
        out = model(token, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return token


@torch.inference_mode()
def fla_records(preset: str, prefills, decodes, tokens: int, repeats: int):
    """fla's records for `preset`'s plain backbone, yielded as each is measured."""
    register()
    config = config_to_fla(get_config(preset))
    backend, context = fla_attention(config)
    with context:
        yield from _records(preset, config, backend, prefills, decodes, tokens, repeats)


def _records(preset: str, config: dict, backend: str, prefills, decodes, tokens: int, repeats: int):
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(config.pop("model_type"), **config))
    model = model.to("cuda", torch.bfloat16).eval()
    base = {"side": "fla", "preset": preset, "dtype": "bfloat16", "device": torch.cuda.get_device_name(),
            "attention": backend}
    vocab = model.config.vocab_size
    for b, p in prefills:
        ids = torch.randint(0, vocab, (b, p), device="cuda")
        seconds = _timed(lambda: model(ids, use_cache=True), repeats)
        yield {**base, "what": "prefill", "batch": b, "prompt": p, "ms": 1e3 * seconds}
    for b, p in decodes:
        ids = torch.randint(0, vocab, (b, p), device="cuda")
        first = _timed(lambda: model(ids, use_cache=True), repeats)
        loop = _timed(lambda: _loop(model, ids, tokens), repeats)
        yield {**base, "what": "decode", "batch": b, "prompt": p, "ms": 1e3 * (loop - first) / tokens}
        hf = _timed(lambda: model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False),
                    repeats)
        yield {**base, "what": "decode, HF generate", "batch": b, "prompt": p, "ms": 1e3 * (hf - first) / tokens}
