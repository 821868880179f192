"""The held-out rule: a document's split is a pure function of its path.

`path_fraction(path)` maps a path to a number in [0, 1) through sha256, so it is stable
across machines, Python versions and rebuilds; a document is held out when that number is
below `heldout` (about `heldout` of all documents). The same number picks nested training
subsets (`in_subset`) for packing a corpus smaller than the whole, never touching held-out.
"""

from __future__ import annotations

import hashlib

HELDOUT = 0.01
TRAIN, HELDOUT_SPLIT = "train", "heldout"
SPLITS = (TRAIN, HELDOUT_SPLIT)


def path_fraction(path: str) -> float:
    """A number in [0, 1) fixed by `path` (the first 8 bytes of its sha256)."""
    return int.from_bytes(hashlib.sha256(path.encode("utf-8")).digest()[:8], "big") / 2**64


def check_fraction(name: str, value: float) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}: must be in (0, 1), got {value}")


def split_of(path: str, heldout: float = HELDOUT) -> str:
    """"heldout" for about a `heldout` share of paths, "train" for the rest."""
    check_fraction("heldout", heldout)
    return HELDOUT_SPLIT if path_fraction(path) < heldout else TRAIN


def in_subset(path: str, fraction: float, heldout: float = HELDOUT) -> bool:
    """Whether `path` is in the training subset of about `fraction` of the training documents (nested: a larger
    fraction keeps more); never true for a held-out path."""
    value = path_fraction(path)
    return value >= heldout and (value - heldout) / (1.0 - heldout) < fraction
