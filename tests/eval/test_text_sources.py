"""Loading documents from local .txt/.jsonl/.parquet files, folders and globs or HF datasets; clear errors otherwise."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval import text_sources
from eval.text_sources import load_texts, local_files


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\n\nline two", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["j0", "j1"])) + "\n")
    pq.write_table(pa.table({"text": ["p0", "p1", "p2"], "n": [1, 2, 3]}), tmp_path / "c.parquet")
    (tmp_path / "ignored.csv").write_text("x")
    return tmp_path


def test_folder_file_and_glob(corpus):
    assert load_texts(str(corpus)) == ["first doc\n\nline two", "j0", "j1", "p0", "p1", "p2"]  # a .txt is one document
    assert load_texts(str(corpus), limit=4) == ["first doc\n\nline two", "j0", "j1", "p0"]
    assert load_texts(str(corpus / "c.parquet"), limit=2) == ["p0", "p1"]
    assert load_texts(str(corpus / "*.jsonl")) == ["j0", "j1"]
    assert local_files(str(corpus / "[ab].*")) == [corpus / "a.txt", corpus / "b.jsonl"]
    assert local_files("org/not-a-local-path") == []


def test_missing_column_suggests_the_closest(corpus):
    missing = r"column: the record at byte 0 of .*b.jsonl' has no string field 'txt' .*did you mean 'text'"
    with pytest.raises(ValueError, match=missing):
        load_texts(str(corpus / "b.jsonl"), column="txt")
    with pytest.raises(ValueError, match=r"column: .*c.parquet' has no column 'body' \(columns: \['text', 'n'\]\)$"):
        load_texts(str(corpus / "c.parquet"), column="body")
    with pytest.raises(ValueError, match=r"column: column 'n' of .*c.parquet' holds int64, not strings"):
        load_texts(str(corpus / "c.parquet"), column="n")
    with pytest.raises(ValueError, match=r"has no string field 'id' \(it has \['id', 'text'\]\)$"):
        load_texts(str(corpus / "b.jsonl"), column="id")  # numbers are not documents


def test_unsupported_and_empty_sources(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"source: .*ignored.csv' is not one of .txt, .jsonl, .parquet"):
        load_texts(str(corpus / "ignored.csv"))
    with pytest.raises(ValueError, match=r"source: .*ignored.csv' is not one of"):
        load_texts(str(corpus / "*"))  # a glob's matches are read as named; a folder skips other files
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"source: .*empty' matches no file \(directories are searched for \*.txt"):
        load_texts(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="source: .*nothing' matches no file"):
        load_texts(str(tmp_path / "*nothing"))
    with pytest.raises(ValueError, match="limit: expected a count >= 0"):
        load_texts(str(corpus), limit=-1)


def test_hub_failure_names_the_offline_switches(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1") as err:
        load_texts("org/some-dataset", config="cfg")
    message = str(err.value)
    assert message.startswith("source: cannot load 'org/some-dataset'")
    assert "config 'cfg', split 'test'" in message and "ConnectionError" in message


def test_hub_column_check(monkeypatch):
    import datasets

    class Fake:
        column_names = ["page", "texts"]

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: Fake())
    with pytest.raises(ValueError, match=r"column: the dataset has no column 'text' .*did you mean 'texts'"):
        text_sources.load_texts("org/ds")


def test_saved_hf_dataset_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    saved = datasets.DatasetDict({"validation": datasets.Dataset.from_dict({"content": ["d0", "d1", "d2"]})})
    saved.save_to_disk(str(tmp_path / "saved"))
    assert local_files(str(tmp_path / "saved")) == []
    assert load_texts(str(tmp_path / "saved"), column="content", split="validation", limit=2) == ["d0", "d1"]
    with pytest.raises(ValueError, match=r"split: .*saved' has no split 'validatoin' .*did you mean 'validation'"):
        load_texts(str(tmp_path / "saved"), column="content", split="validatoin")


def test_a_path_like_source_that_does_not_exist_never_goes_to_the_hub(tmp_path, monkeypatch):
    hub = []

    def load_hf_dataset(name, **kw):
        hub.append(name)
        raise ValueError("not on the hub")

    monkeypatch.setattr(text_sources, "load_hf_dataset", load_hf_dataset)
    monkeypatch.chdir(tmp_path)
    for source in ("wiki.test.jsonl", "./wiki", "~/data/wiki", "data/wiki/test", "/nowhere/wiki", "data/notes.csv"):
        with pytest.raises(ValueError, match=rf"source: '{source}' does not exist \(it looks like a local path"):
            load_texts(source)
    assert hub == []
    with pytest.raises(ValueError, match="not on the hub"):  # a hub id (name or owner/name) still goes there
        load_texts("owner/name")
    assert hub == ["owner/name"]


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("na\xefve".encode("latin-1"))
    with pytest.raises(ValueError, match=r"source: '.*latin1\.txt' is not UTF-8 text \(byte 2"):
        load_texts(str(tmp_path / "latin1.txt"))
    assert load_texts(str(tmp_path / "latin1.txt"), encoding_errors="replace") == ["na\ufffdve"]
