"""Offline checks of the Debian corpus builder on a tiny .deb made in tmp_path (no download, seconds)."""

import gzip
import hashlib
import json
import os
import subprocess

import pytest

from ccq_jax.tokenizers import load_tokenizer
from study.build import build
from study.debian_corpus import table
from study.documents import file_text, html_text, tree_documents
from study.extract import extract_deb
from study.manifest import Manifest, Package, fetch_deb, load_manifest, verify_deb
from study.pack import pack, unpack
from study.split import in_subset, path_fraction, split_of
from study.tokenizer import BOUNDARY
from train.data.shards import TokenShards

PAGE = """<html><head><title>T</title><style>p {color: red}</style></head><body>
<nav><a href="a.html">Previous chapter</a></nav>
<div class="sphinxsidebar"><p>Quick search box</p></div>
<h1>Linked lists</h1><p>A list   is a
chain of <b>nodes</b>.</p><script>var x = "hidden";</script>
<pre>struct node {
    int value;
};</pre><br><p>Fish &amp; chips</p></body></html>"""

PROSE = ("The quick brown fox jumps over the lazy dog while the kernel schedules another task. " * 6).strip()


def _words(i: int) -> str:
    return f"Document {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(60)) + " " + PROSE


def make_deb(tmp_path, files: dict[str, bytes], name="fake-doc"):
    root = tmp_path / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n")
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    deb = tmp_path / f"{name}_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb


def test_html_text_drops_script_style_and_navigation():
    text = html_text(PAGE)
    assert "Linked lists" in text
    assert "A list is a chain of nodes." in text
    assert "struct node {\n    int value;\n};" in text
    assert "Fish & chips" in text
    for gone in ("hidden", "color", "Previous chapter", "Quick search", "T\n"):
        assert gone not in text
    assert text.startswith("Linked lists\n\nA list")


def test_file_text_kinds():
    man = b".TH LS 1\n.SH NAME\nls \\- list directory contents\n"
    assert file_text("ls.1.gz", gzip.compress(man)) == man.decode()
    assert file_text("notes.rst", b"Title\n=====\r\nbody\n") == "Title\n=====\nbody\n"
    assert file_text("blob.bin", b"abc\0def") is None
    assert file_text("latin1.txt", "caf\xe9".encode("latin-1")) is None
    assert file_text("logo.png", b"not really a png") is None
    assert file_text("search.js", b"var index = {};") is None
    assert file_text("broken.gz", b"not gzip") is None
    assert file_text("page.html", PAGE.encode()).startswith("Linked lists")


def test_tree_documents_sorted_dedup_and_skips(tmp_path):
    files = {
        "b/two.txt": PROSE.encode(),
        "a/one.txt": PROSE.encode(),  # same text as b/two.txt: only the first in path order is kept
        "a/man.1.gz": gzip.compress(_words(1).encode()),
        "c/tiny.txt": b"too short",
        "c/image.png": b"\x89PNG\r\n\x1a\n\0\0",
        "d/skip.txt": _words(2).encode(),
        "e/page.html": f"<p>{_words(3)}</p>".encode(),
    }
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    counts = {}
    docs = list(tree_documents(tmp_path, exclude=["d/*"], seen=set(), counts=counts))
    assert [rel for rel, _ in docs] == ["a/man.1.gz", "a/one.txt", "e/page.html"]
    assert docs[0][1] == _words(1)
    assert counts == {"duplicate": 1, "not_text": 1, "tiny": 1, "excluded": 1}


def test_extract_deb_and_documents(tmp_path):
    deb = make_deb(tmp_path, {"usr/share/doc/fake/guide.html": PAGE.encode() + PROSE.encode(),
                              "usr/share/man/man1/fake.1.gz": gzip.compress(_words(5).encode())})
    extract_deb(deb, tmp_path / "x")
    docs = dict(tree_documents(tmp_path / "x", seen=set()))
    assert sorted(docs) == ["usr/share/doc/fake/guide.html", "usr/share/man/man1/fake.1.gz"]
    assert "hidden" not in docs["usr/share/doc/fake/guide.html"]


def test_split_is_deterministic_and_near_target():
    paths = [f"pkg/usr/share/doc/file{i}.html" for i in range(20000)]
    assert [split_of(p) for p in paths[:50]] == [split_of(p) for p in paths[:50]]
    assert path_fraction("pkg/a") == path_fraction("pkg/a") != path_fraction("pkg/b")
    share = sum(split_of(p) == "heldout" for p in paths) / len(paths)
    assert 0.008 < share < 0.012
    train = [p for p in paths if split_of(p) == "train"]
    half = {p for p in train if in_subset(p, 0.5)}
    assert 0.47 < len(half) / len(train) < 0.53
    assert half <= {p for p in train if in_subset(p, 0.8)}
    assert not any(in_subset(p, 0.99) for p in paths if split_of(p) == "heldout")
    with pytest.raises(ValueError, match="heldout"):
        split_of("x", heldout=1.5)


def test_manifest_hash_verification(tmp_path):
    deb = tmp_path / "x.deb"
    deb.write_bytes(b"payload")
    verify_deb(deb, hashlib.sha256(b"payload").hexdigest())
    with pytest.raises(ValueError, match="sha256: .*x.deb"):
        verify_deb(deb, "0" * 64)
    package = Package("x", "1", "x.deb", "0" * 64, "prose")
    with pytest.raises(ValueError, match="sha256"):
        fetch_deb(package, tmp_path)  # cached file present but wrong: no download, a clear error
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"packages": [{"package": "x", "version": "1", "file": "x.deb", "sha256": "0",
                                             "kind": "poetry"}]}))
    with pytest.raises(ValueError, match="kind"):
        load_manifest(bad)


def test_fetch_deb_names_a_version_apt_lacks(tmp_path, monkeypatch):
    # apt's lists older than the manifest's pin: one clear error that says what to do, not a traceback of
    # CalledProcessError (a stand-in apt-get that fails as the real one does for an unknown version)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "apt-get"
    fake.write_text("#!/bin/sh\necho \"E: Version '$2' was not found\" >&2\nexit 100\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    package = Package("linux-doc-6.1", "6.1.999-1", "linux-doc.deb", "0" * 64, "prose")
    with pytest.raises(ValueError, match=r"version: apt-get download of linux-doc-6.1=6.1.999-1 failed "
                                         r"\(exit 100\).*apt-get update"):
        fetch_deb(package, tmp_path / "cache")


def test_repo_manifest_pins_every_package():
    manifest = load_manifest()
    assert len(manifest.packages) >= 10
    for package in manifest.packages:
        assert len(package.sha256) == 64 and package.version and package.file.endswith(".deb")
    assert {p.kind for p in manifest.packages} == {"prose", "code"}


def test_build_tokenizer_shards_and_pack_round_trip(tmp_path):
    files = {f"usr/share/doc/fake/part{i:03d}.txt": _words(i).encode() for i in range(300)}
    deb = make_deb(tmp_path, files)
    package = Package("fake-doc", "1.0-1", deb.name, hashlib.sha256(deb.read_bytes()).hexdigest(), "prose")
    manifest = Manifest((package,), heldout=0.05, vocab_size=400)
    out = tmp_path / "corpus"
    stats = build(manifest, out, cache=tmp_path)
    src = stats["sources"]["fake-doc"]
    assert src["train"]["documents"] + src["heldout"]["documents"] == 300
    assert 5 <= src["heldout"]["documents"] <= 30
    rows = [json.loads(line) for line in (out / "documents" / "heldout" / "fake-doc.jsonl").read_text().splitlines()]
    assert all(split_of(r["path"], 0.05) == "heldout" and r["source"] == "fake-doc" for r in rows)

    tokenizer = load_tokenizer(str(out / "tokenizer" / "tokenizer.json"))
    assert tokenizer.vocab_size == 400
    assert tokenizer.bos_id == tokenizer.eos_id == 0  # <|endoftext|> is the first (special) token
    shards = TokenShards([str(out / "shards" / "heldout")])
    assert len(shards) == len(rows)
    assert tokenizer.decode(shards[0]) == rows[0]["text"]
    assert shards[0].max() < 400 and BOUNDARY not in rows[0]["text"]
    tokens = sum(len(shards[i]) for i in range(len(shards)))
    assert src["heldout"]["tokens"] == tokens > 0
    assert json.loads((out / "stats.json").read_text())["totals"]["train"]["prose_share"] == 1.0
    assert "| fake-doc | 1.0-1 | prose | 300 |" in table(stats)

    packed = tmp_path / "new-folder" / "corpus.tar.xz"  # a folder that does not exist yet is made
    info = pack(out, packed, max_mib=1, fraction=0.5)
    assert info["documents"]["heldout"] == len(rows)
    assert 0.35 * src["train"]["documents"] < info["documents"]["train"] < 0.65 * src["train"]["documents"]
    unpack(packed, tmp_path / "there", threads=1)
    there = TokenShards([str(tmp_path / "there" / "shards" / "heldout")])
    assert [list(there[i]) for i in range(len(there))] == [list(shards[i]) for i in range(len(shards))]
    assert len(TokenShards([str(tmp_path / "there" / "shards" / "train")])) == info["documents"]["train"]
    with pytest.raises(ValueError, match="max_mib"):
        pack(out, packed, max_mib=1e-4, fraction=0.5)
