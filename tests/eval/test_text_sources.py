"""Loading documents from local .txt/.jsonl/.parquet files, folders and globs; clear errors otherwise."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval import text_sources
from eval.text_sources import load_texts


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\nline two", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["j0", "j1"])) + "\n")
    pq.write_table(pa.table({"text": ["p0", "p1", "p2"], "n": [1, 2, 3]}), tmp_path / "c.parquet")
    (tmp_path / "ignored.csv").write_text("x")
    return tmp_path


def test_folder_file_and_glob(corpus):
    assert load_texts(str(corpus)) == ["first doc\nline two", "j0", "j1", "p0", "p1", "p2"]
    assert load_texts(str(corpus / "c.parquet"), limit=2) == ["p0", "p1"]
    assert load_texts(str(corpus / "*.jsonl")) == ["j0", "j1"]


def test_missing_column_suggests_the_closest(corpus):
    with pytest.raises(ValueError, match="did you mean 'text'"):
        load_texts(str(corpus / "b.jsonl"), column="txt")
    with pytest.raises(ValueError, match="no field 'body'"):
        load_texts(str(corpus / "c.parquet"), column="body")


def test_unsupported_and_empty_sources(corpus, tmp_path):
    with pytest.raises(ValueError, match="not one of"):
        load_texts(str(corpus / "ignored.csv"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no"):
        load_texts(str(tmp_path / "empty"))


def test_hub_failure_names_the_offline_switches(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1") as err:
        load_texts("org/some-dataset", config="cfg")
    assert "org/some-dataset" in str(err.value) and "ConnectionError" in str(err.value)


def test_hub_column_check(monkeypatch):
    import datasets

    class Fake:
        column_names = ["page"]

        def __getitem__(self, name):
            return ["x"]

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: Fake())
    with pytest.raises(ValueError, match="no field 'text'"):
        text_sources.load_texts("org/ds")
