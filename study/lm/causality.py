"""Is a trained checkpoint's low perplexity real? Three checks on held-out text, each printed and written as JSON.

    python -m study.lm.causality --checkpoint RUN_DIR --data HELDOUT_DIR --tokenizer tokenizer.json --out X.json
    python -m study.lm.causality --preset gdn-100m ...   (a random initialisation instead: the kernels' causality)

1. Causality: the logits up to position p do not change when every token after p is replaced (impl as trained).
2. The same mean next-token loss from every attention implementation: the kernels ("pallas"), chunkwise XLA
   ("chunk") and the token-by-token recurrence ("recurrent", the ground truth), relative RMS of the logits too.
3. The loss on rows whose tokens are shuffled: how much of the loss comes from word order at all.
"""

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

from ccq_jax.checkpoints import load_checkpoint_model, random_model
from ccq_jax.tokenizers import load_tokenizer
from eval.text_sources import load_texts


def _rows(data, tokenizer, batch, length):
    tokens = np.concatenate([tokenizer.encode(t) for t in load_texts(data, limit=400)])
    need = batch * (length + 1)
    if tokens.size < need:
        raise ValueError(f"data: {tokens.size} tokens, need {need}")
    return tokens[:need].reshape(batch, length + 1).astype(np.int32)


def _loss(logits, targets):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return float(-jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1)))


def _model(a, impl):
    if a.checkpoint:
        return load_checkpoint_model(a.checkpoint, overrides={"kernel.impl": impl})[0]
    overrides = {"kernel.impl": impl, "dtype": "bfloat16", "vocab_size": load_tokenizer(a.tokenizer).vocab_size}
    return random_model(a.preset, tokenizer=a.tokenizer, overrides=overrides).model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a ccq-train run folder")
    which.add_argument("--preset", help="a model preset, randomly initialised (bf16 compute)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--cut", type=int, default=600, help="check 1: tokens after this position are replaced")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = _rows(a.data, load_tokenizer(a.tokenizer), a.batch, a.length)
    inputs, targets = jnp.asarray(rows[:, :-1]), jnp.asarray(rows[:, 1:])
    report = {"checkpoint": a.checkpoint, "preset": a.preset, "batch": a.batch, "length": a.length, "cut": a.cut}
    logits = {}
    for impl in ("pallas", "chunk", "recurrent"):
        model = _model(a, impl)
        logits[impl] = np.asarray(jax.jit(lambda x, m=model: m(x))(inputs), np.float32)
        report[f"loss_{impl}"] = _loss(logits[impl], targets)
        if impl == "pallas":
            rng = np.random.default_rng(0)
            changed = np.array(rows[:, :-1])
            changed[:, a.cut + 1:] = rng.integers(0, model.config.vocab_size, changed[:, a.cut + 1:].shape)
            after = np.asarray(jax.jit(lambda x, m=model: m(x))(jnp.asarray(changed)), np.float32)
            report["prefix_max_abs_change"] = float(np.abs(after[:, :a.cut + 1] - logits[impl][:, :a.cut + 1]).max())
            report["suffix_max_abs_change"] = float(np.abs(after[:, a.cut + 1:] - logits[impl][:, a.cut + 1:]).max())
            shuffled = np.array(rows)
            for r in shuffled:
                rng.shuffle(r)
            shuffled_logits = jax.jit(lambda x, m=model: m(x))(jnp.asarray(shuffled[:, :-1]))
            report["loss_shuffled_rows"] = _loss(shuffled_logits, jnp.asarray(shuffled[:, 1:]))
    truth = logits["recurrent"]
    for impl in ("pallas", "chunk"):
        report[f"logits_rel_rms_{impl}_vs_recurrent"] = float(
            np.sqrt(np.mean((logits[impl] - truth) ** 2) / np.mean(truth ** 2)))
    print(json.dumps(report, indent=1))
    json.dump(report, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
