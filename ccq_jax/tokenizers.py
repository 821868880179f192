"""Tokenizers behind one small protocol: the built-in byte tokenizer and any HF `tokenizer.json`.

Shared by training (`train.data`) and evaluation (`eval`). `encode` returns the document's
ids without special tokens (the training pipeline adds BOS/EOS); `vocab_size` is the size the
model's embedding needs (every id is below it). `spec` is a JSON-able description stored in
the `ccq-prepare-data` manifest so that training can check that shards and tokenizer agree.
`load_tokenizer(name, bos_token=..., eos_token=...)` takes the `tokenizer`, `bos_token` and
`eos_token` fields of a data config ("byte" or the path of a tokenizer.json), or a folder holding a
tokenizer that `save_tokenizer` wrote (a saved model's: tokenizer.json with a tokenizer_config.json naming its
special tokens, or for the byte tokenizer a tokenizer_config.json naming it, `{"ccq_jax_tokenizer": "byte"}`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

BYTE_TOKENIZER = "byte"
VOCAB_MULTIPLE = 128
_BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "[CLS]", "<|startoftext|>")
_EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]", "<|im_end|>")
_PAD_NAMES = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")
TOKENIZER_JSON, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
BYTE_MARKER = "ccq_jax_tokenizer"  # the key of tokenizer_config.json that names the byte tokenizer


class Tokenizer(Protocol):
    vocab_size: int
    bos_id: int | None
    eos_id: int
    pad_id: int

    def encode(self, text: str) -> np.ndarray:
        """int32 [n] ids of `text`, no special tokens."""

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """`encode` of each text (HF tokenizers: in parallel, outside the GIL)."""

    def decode(self, ids) -> str: ...

    def save(self, folder: Path) -> None:
        """Its files in `folder` (see `save_tokenizer`)."""

    @property
    def spec(self) -> dict[str, Any]: ...


def round_vocab_size(n: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """`n` rounded up to a multiple of `multiple` (embedding tables tile better on TPU/GPU)."""
    return -(-n // multiple) * multiple


class ByteTokenizer:
    """UTF-8 bytes are ids 0..255; BOS = 256, EOS = 257, PAD = 258; vocab_size = 384 (259 rounded to 128)."""

    bos_id = 256
    eos_id = 257
    pad_id = 258
    vocab_size = round_vocab_size(259)

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in texts]

    def decode(self, ids) -> str:
        ids = np.asarray(ids)
        return bytes(ids[ids < 256].astype(np.uint8)).decode("utf-8", errors="replace")

    @property
    def spec(self) -> dict[str, Any]:
        return {"kind": BYTE_TOKENIZER, "vocab_size": self.vocab_size, "bos_id": self.bos_id, "eos_id": self.eos_id}

    def save(self, folder: Path) -> None:
        """tokenizer_config.json naming the byte tokenizer (no vocabulary file: it has none)."""
        _write_json(folder / TOKENIZER_CONFIG, {BYTE_MARKER: BYTE_TOKENIZER, "bos_token_id": self.bos_id,
                                                "eos_token_id": self.eos_id, "pad_token_id": self.pad_id})


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _sidecar_token(path: Path, key: str) -> str | None:
    """`key` ("bos_token", ...) from a tokenizer_config.json next to the tokenizer.json, if any."""
    config = path.parent / "tokenizer_config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get(key)
    return value.get("content") if isinstance(value, dict) else value


class HFTokenizer:
    """A `tokenizer.json` through HF `tokenizers` (no network: the file must be local).

    Special tokens: `bos_token`/`eos_token` when given, else those of a `tokenizer_config.json`
    next to the file, else the first present of common names (`<|endoftext|>`, `</s>`, ...).
    An EOS token is required (it ends every document); BOS is optional. PAD falls back to EOS
    (padding is masked, its id never matters).
    """

    def __init__(self, path: str, *, bos_token: str | None = None, eos_token: str | None = None):
        try:
            import tokenizers
        except ImportError as e:
            raise ImportError("tokenizer: reading a tokenizer.json needs `pip install tokenizers`") from e
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"tokenizer: {path!r} is neither 'byte' nor an existing tokenizer.json file")
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(self.path))
        except Exception as err:  # the library raises a bare Exception on any file it cannot parse
            raise ValueError(f"tokenizer: {path!r} is not a tokenizer.json the tokenizers library can read "
                             f"({' '.join(str(err).split())})") from None
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.bos_id = self._find("bos_token", bos_token, _BOS_NAMES)
        self.eos_id = self._find("eos_token", eos_token, _EOS_NAMES)
        if self.eos_id is None:
            raise ValueError(
                f"eos_token: no end-of-document token found in {path!r}; set eos_token to one of its tokens"
            )
        pad = self._find("pad_token", None, _PAD_NAMES)
        self.pad_id = self.eos_id if pad is None else pad
        self._sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()

    def _find(self, field: str, given: str | None, names: tuple[str, ...]) -> int | None:
        if given is not None:
            token_id = self._tok.token_to_id(given)
            if token_id is None:
                raise ValueError(f"{field}: token {given!r} is not in the vocabulary of {str(self.path)!r}")
            return token_id
        for name in (_sidecar_token(self.path, field), *names):
            if name is not None and self._tok.token_to_id(name) is not None:
                return self._tok.token_to_id(name)
        return None

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int32) for e in encodings]

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in np.asarray(ids)], skip_special_tokens=False)

    def save(self, folder: Path) -> None:
        """A copy of the tokenizer.json and a tokenizer_config.json naming the special tokens in use, so that the
        folder's tokenizer has the same ids (BOS, EOS, PAD) whatever picked them here."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / TOKENIZER_JSON).write_bytes(self.path.read_bytes())
        names = {"bos_token": self.bos_id, "eos_token": self.eos_id, "pad_token": self.pad_id}
        _write_json(folder / TOKENIZER_CONFIG, {k: self._tok.id_to_token(i) for k, i in names.items() if i is not None})

    @property
    def spec(self) -> dict[str, Any]:
        return {
            "kind": "tokenizer.json",
            "path": str(self.path),
            "sha256": self._sha256,
            "vocab_size": self.vocab_size,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
        }


def save_tokenizer(tokenizer: Tokenizer, folder) -> None:
    """`tokenizer`'s files in `folder`, which `load_tokenizer(folder)` reads back."""
    tokenizer.save(Path(folder))


def _saved_tokenizer(folder: Path, bos_token: str | None, eos_token: str | None) -> Tokenizer:
    if (folder / TOKENIZER_JSON).is_file():
        return HFTokenizer(str(folder / TOKENIZER_JSON), bos_token=bos_token, eos_token=eos_token)
    config = folder / TOKENIZER_CONFIG
    if config.is_file() and json.loads(config.read_text()).get(BYTE_MARKER) == BYTE_TOKENIZER:
        return ByteTokenizer()
    raise ValueError(f"tokenizer: the folder {str(folder)!r} holds no tokenizer; expected {TOKENIZER_JSON} or a "
                     f"{TOKENIZER_CONFIG} with {BYTE_MARKER}: {BYTE_TOKENIZER!r} (as save_tokenizer writes)")


def has_tokenizer(folder) -> bool:
    """Whether `folder` holds tokenizer files (those of `save_tokenizer`, or a tokenizer.json)."""
    folder = Path(folder)
    return (folder / TOKENIZER_JSON).is_file() or (folder / TOKENIZER_CONFIG).is_file()


def load_tokenizer(name: str = BYTE_TOKENIZER, *, bos_token: str | None = None,
                   eos_token: str | None = None) -> Tokenizer:
    """The tokenizer `name`: "byte", a tokenizer.json path or a folder `save_tokenizer` wrote; bos/eos_token: see
    `HFTokenizer`."""
    if name == BYTE_TOKENIZER:
        return ByteTokenizer()
    if Path(name).is_dir():
        return _saved_tokenizer(Path(name), bos_token, eos_token)
    return HFTokenizer(name, bos_token=bos_token, eos_token=eos_token)


def same_tokenizer(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two `spec`s describe the same tokenization (the file path may differ, the content not)."""
    keys = ("kind", "sha256", "vocab_size", "bos_id", "eos_id")
    return all(a.get(k) == b.get(k) for k in keys)
