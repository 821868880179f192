"""Train the corpus's byte-level BPE tokenizer (HF `tokenizers`) and save it for `ccq_jax.tokenizers`.

The vocabulary is `vocab_size` ids (16384 by default, so token ids fit `uint16` shards)
including one special token, `<|endoftext|>`, that is both BOS and EOS. `train_tokenizer`
writes `tokenizer.json` and a `tokenizer_config.json` naming that token as `bos_token` and
`eos_token`, which `ccq_jax.tokenizers.HFTokenizer` reads from beside the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOUNDARY = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], out_dir: Path, *, vocab_size: int = 16384, length: int | None = None) -> Path:
    """Train on `texts` (`length` of them, for progress) and save into `out_dir`; returns the tokenizer.json path."""
    if not 257 <= vocab_size <= 2**16:
        raise ValueError(f"vocab_size: must be in [257, 65536] (the byte alphabet + {BOUNDARY}, uint16 ids), "
                         f"got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[BOUNDARY], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2, show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer, length=length)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tokenizer.json"
    tokenizer.save(str(path))
    config = {"bos_token": BOUNDARY, "eos_token": BOUNDARY, "model_max_length": 2048}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path
