"""Unpack a .deb into a directory with `dpkg-deb -x`, and the archives inside it that the manifest names."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def extract_deb(deb: Path, dest: Path, tarballs: Sequence[str] = ()) -> None:
    """`dpkg-deb -x deb dest`, then each tarball (a path inside `dest`) unpacked beside itself and removed."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    for name in tarballs:
        tarball = dest / name
        if not tarball.is_file():
            raise ValueError(f"tarballs: {name!r} is not in {deb.name}")
        subprocess.run(["tar", "-xf", str(tarball), "-C", str(tarball.parent)], check=True)
        tarball.unlink()
