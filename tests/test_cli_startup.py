"""How the commands start: ccq-train, ccq-eval and ccq-demo turn on JAX's persistent compilation cache (a documented
folder, an off switch, a JAX_COMPILATION_CACHE_DIR of the user's kept), and ccq-demo's rows and progress reach a
pipe while it runs, not at its end."""

import io

import jax
import pytest

import ccq_jax.demo as demo
import eval.__main__ as eval_cli
import train.__main__ as train_cli
from ccq_jax.cli import compilation_cache_dir


@pytest.fixture
def cache_setting():
    """Restores JAX's cache folder after a command set it."""
    before = jax.config.jax_compilation_cache_dir
    yield
    jax.config.update("jax_compilation_cache_dir", before)


def test_the_cache_folder_its_switch_and_the_users_own(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert compilation_cache_dir({**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg/ccq-jax/xla"
    assert compilation_cache_dir({"CCQ_JAX_COMPILATION_CACHE": str(tmp_path / "mine")}) == tmp_path / "mine"
    for off in ("off", "OFF", "0", "false", "none"):
        assert compilation_cache_dir({"CCQ_JAX_COMPILATION_CACHE": off}) is None
    assert compilation_cache_dir({"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax")}) is None  # JAX reads it itself


def _commands(monkeypatch):
    """Each command's main with its work replaced by nothing: what runs is its start-up."""
    monkeypatch.setattr(train_cli, "_run", lambda args: 0)
    monkeypatch.setattr(eval_cli, "_run", lambda args: 0)
    monkeypatch.setattr(demo, "run", lambda *args, **kwargs: iter(()))
    return {"ccq-train": lambda: train_cli.main(["--no-progress"]),
            "ccq-eval": lambda: eval_cli.main(["ppl", "--preset", "gla-tiny", "--data", "x.txt"]),
            "ccq-demo": lambda: demo.main([])}


def test_each_command_turns_the_cache_on_at_start(tmp_path, monkeypatch, cache_setting):
    commands = _commands(monkeypatch)
    for name, command in commands.items():
        jax.config.update("jax_compilation_cache_dir", None)
        monkeypatch.setenv("CCQ_JAX_COMPILATION_CACHE", str(tmp_path / name))
        command()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / name), name


def test_the_off_switch_leaves_the_cache_unset(monkeypatch, cache_setting):
    commands = _commands(monkeypatch)
    monkeypatch.setenv("CCQ_JAX_COMPILATION_CACHE", "off")
    jax.config.update("jax_compilation_cache_dir", None)
    for name, command in commands.items():
        command()
        assert jax.config.jax_compilation_cache_dir is None, name


class Pipe(io.BytesIO):
    """The far end of a pipe: holds only what the process flushed to it."""


def test_the_demo_prints_each_row_and_progress_into_a_pipe_as_it_goes(monkeypatch):
    """Piped, ccq-demo printed nothing for 4 minutes: its prints sat in the pipe's buffer until it ended."""
    pipe, err = Pipe(), io.StringIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(pipe, encoding="utf-8"))
    monkeypatch.setattr("sys.stderr", err)
    seen = []  # what had reached the pipe each time the second op was traced
    gla, names = demo.OPS["gla"]

    def watched(*args, **kwargs):
        seen.append(pipe.getvalue().decode())
        return gla(*args, **kwargs)

    monkeypatch.setattr(demo, "OPS", {"gla": (gla, names), "gla, again": (watched, names)})
    demo.main(["--batch", "1", "--seqlen", "8", "--heads", "1", "--key-dim", "4", "--value-dim", "4", "--repeats", "1"])
    first_rows = [line for line in seen[0].splitlines() if line.startswith("gla ")]
    assert "errors are relative RMS" in seen[0] and len(first_rows) == len(demo.COMPARED), seen[0]
    pairs = 2 * len(demo.COMPARED)
    assert "ccq-demo: 100%" in err.getvalue() and f"{pairs}/{pairs}" in err.getvalue(), err.getvalue()
