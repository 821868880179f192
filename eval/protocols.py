"""The small interfaces every evaluation is written against: model callables and a tokenizer.

The evaluations never import a model. They take plain callables, so a real model, a
converted fla checkpoint or a toy function in a test plug in the same way:

- `LogitsFn`:   `logits_fn(input_ids [B, T] int32) -> logits [B, T, E]` (one full forward);
- `StepFn`:     `step_fn(input_ids [B, C] int32, carry) -> (logits [B, C, E], carry)`, with
                `init_carry(batch) -> carry`; a recurrent model's prefill with its cache, so
                long inputs go through in chunks with constant memory;
- `GenerateFn`: `generate_fn(prompt_ids: list[list[int]], max_new_tokens) -> list[list[int]]`,
                greedy, returning only the new tokens of each prompt (it may stop early, e.g. at
                EOS; tokens after the tokenizer's `eos_id` are ignored by the callers);
- `Tokenizer`:  any object with `encode(str) -> list[int]`, `decode(list[int]) -> str`,
                `eos_id: int` and `vocab_size: int`.
"""

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

LogitsFn = Callable[[np.ndarray], Any]
StepFn = Callable[[np.ndarray, Any], tuple[Any, Any]]
InitCarry = Callable[[int], Any]
GenerateFn = Callable[[list[list[int]], int], list[list[int]]]


class Tokenizer(Protocol):
    eos_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


TOKENIZER_MEMBERS = ("encode", "decode", "eos_id", "vocab_size")


def check_tokenizer(tokenizer: object) -> Tokenizer:
    """Return `tokenizer` if it has every member of the protocol, else raise ValueError naming the missing ones."""
    missing = [m for m in TOKENIZER_MEMBERS if not hasattr(tokenizer, m)]
    if missing:
        raise ValueError(
            f"tokenizer: {type(tokenizer).__name__} lacks {', '.join(missing)}; expected an object with "
            "encode(str) -> list[int], decode(list[int]) -> str, eos_id: int and vocab_size: int"
        )
    return tokenizer


def cut_at_eos(ids: list[int], eos_id: int) -> list[int]:
    """The tokens before the first `eos_id` (all of them when there is none)."""
    return ids[: ids.index(eos_id)] if eos_id in ids else list(ids)
