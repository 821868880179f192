"""Checkpoints that prove they are whole: a manifest of every file's size and CRC-32, written beside each saved step and
checked before it is restored.

`write_manifest(step_dir)` records `<step_dir>/ccq_manifest.json` once the step is final
(`train.checkpoint.Checkpointer` does it after each save has finished). `verified_step(root,
step)` checks a step against its manifest before anything reads it: a missing, truncated (other
size) or corrupted (other CRC) file raises `DamagedCheckpoint` naming the step, the file and
the previous kept step; with `previous=True` the latest earlier kept step that checks out is
taken instead (logged as a warning). A step saved before manifests existed has none: there
is nothing to verify, and it loads as before.

Checking reads every file of the step once (CRC-32 runs at about a GB/s on one core).
"""

import json
import logging
import os
import pathlib
import zlib

import orbax.checkpoint as ocp

MANIFEST = "ccq_manifest.json"
ON_DAMAGED = ("stop", "previous")
_CHUNK = 1 << 24

log = logging.getLogger(__name__)


class DamagedCheckpoint(ValueError):
    """A saved step whose files differ from its manifest."""


def _crc32(path: pathlib.Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _files(step_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in step_dir.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(step_dir) -> None:
    """Record the size and CRC-32 of every file of the saved step `step_dir` in its manifest (written atomically)."""
    step_dir = pathlib.Path(step_dir)
    files = {str(p.relative_to(step_dir)): {"bytes": p.stat().st_size, "crc32": _crc32(p)} for p in _files(step_dir)}
    tmp = step_dir / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps({"format": 1, "files": files}, indent=1))
    os.replace(tmp, step_dir / MANIFEST)


def damage(step_dir) -> str | None:
    """What is wrong with the saved step `step_dir` ("state/...: truncated ..."), or None when it matches its
    manifest or has none (saved before manifests existed: nothing to verify)."""
    step_dir = pathlib.Path(step_dir)
    if not (step_dir / MANIFEST).is_file():
        return None
    try:
        files = json.loads((step_dir / MANIFEST).read_text())["files"]
    except (ValueError, KeyError, TypeError) as err:
        return f"{MANIFEST}: unreadable ({err})"
    for name, want in files.items():
        path = step_dir / name
        if not path.is_file():
            return f"{name}: missing"
        size = path.stat().st_size
        if size != want["bytes"]:
            return f"{name}: truncated or extended ({size} bytes, {want['bytes']} when saved)"
        if _crc32(path) != want["crc32"]:
            return f"{name}: corrupted (its CRC-32 differs from the one saved)"
    return None


def verified_step(root, step: int, *, previous: bool = False) -> int:
    """`step` of the checkpoints folder `root` if its files match its manifest; else, with `previous`, the latest
    earlier kept step that does (a warning names the damaged ones), or DamagedCheckpoint naming the step, the file
    and the previous kept step."""
    root = pathlib.Path(root)
    earlier = sorted((s for s in ocp.utils.checkpoint_steps(root) if s < step), reverse=True)
    problems = []
    for candidate in [step, *(earlier if previous else [])]:
        problem = damage(root / str(candidate))
        if problem is None:
            if problems:
                log.warning("checkpoint: %s; restoring step %d instead", "; ".join(problems), candidate)
            return candidate
        problems.append(f"step {candidate} in {root} is damaged: {problem}")
    if previous:
        raise DamagedCheckpoint(f"checkpoint: {'; '.join(problems)}; no earlier kept step is whole")
    offer = (f"the previous kept step is {earlier[0]}: load it by its step, or set on_damaged_checkpoint='previous' "
             f"to take the latest whole one" if earlier else "no earlier step is kept")
    raise DamagedCheckpoint(f"checkpoint: {problems[0]}; {offer}")
