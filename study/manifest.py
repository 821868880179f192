"""The corpus manifest: pinned Debian packages, their .deb sha256 and what to take from each.

`study/corpus_manifest.json` lists every package with its exact version, the .deb file name
that `apt-get download PKG=VERSION` writes, the file's sha256, its kind ("prose" for English
documentation, "code" for source code) and include/exclude globs over the extracted tree
(`tarballs` names archives inside the .deb to unpack too). `fetch_deb` downloads into a
cache directory once and `verify_deb` checks the hash, raising a ValueError on a mismatch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

MANIFEST = Path(__file__).with_name("corpus_manifest.json")
KINDS = ("prose", "code")


@dataclass(frozen=True)
class Package:
    package: str
    version: str
    file: str
    sha256: str
    kind: str
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    tarballs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Manifest:
    packages: tuple[Package, ...]
    exclude: tuple[str, ...] = ()
    heldout: float = 0.01
    vocab_size: int = 16384


def _package(entry: dict, where: str) -> Package:
    missing = [k for k in ("package", "version", "file", "sha256", "kind") if k not in entry]
    if missing:
        raise ValueError(f"manifest: {where} lacks {missing}")
    if entry["kind"] not in KINDS:
        raise ValueError(f"manifest: {where} kind must be one of {KINDS}, got {entry['kind']!r}")
    lists = {k: tuple(entry[k]) for k in ("include", "exclude", "tarballs") if k in entry}
    return Package(entry["package"], entry["version"], entry["file"], entry["sha256"], entry["kind"], **lists)


def load_manifest(path: str | Path = MANIFEST) -> Manifest:
    """The manifest at `path`, its packages sorted by name (the corpus's document order)."""
    data = json.loads(Path(path).read_text())
    packages = sorted((_package(e, f"packages[{i}]") for i, e in enumerate(data["packages"])), key=lambda p: p.package)
    names = [p.package for p in packages]
    if len(set(names)) != len(names):
        raise ValueError(f"manifest: {str(path)!r} lists a package twice")
    return Manifest(tuple(packages), tuple(data.get("exclude", ())), data.get("heldout", 0.01),
                    data.get("vocab_size", 16384))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_deb(path: Path, sha256: str) -> None:
    """Raise a ValueError naming the file when its sha256 is not `sha256`."""
    actual = sha256_of(path)
    if actual != sha256:
        raise ValueError(f"sha256: {str(path)!r} has sha256 {actual}, the manifest pins {sha256}; "
                         "delete the file to download it again, or fix the manifest")


def fetch_deb(package: Package, cache: Path) -> Path:
    """The verified .deb of `package` in `cache`, downloaded with `apt-get download` when absent."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / package.file
    if not path.is_file():
        done = subprocess.run(["apt-get", "download", f"{package.package}={package.version}"], cwd=cache)
        if done.returncode != 0:
            raise ValueError(f"version: apt-get download of {package.package}={package.version} failed (exit "
                             f"{done.returncode}); if apt's lists lack that version, run `apt-get update` "
                             "(as root) and build again")
        if not path.is_file():
            raise ValueError(f"file: apt-get download of {package.package}={package.version} did not write "
                             f"{package.file!r}; fix the manifest's file name")
    verify_deb(path, package.sha256)
    return path
