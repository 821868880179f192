"""What the command lines and the user-facing loaders share: paths a user typed, and how a user error ends a command.

`user_path(p)`: a path as the user wrote it (relative to the working directory, `~` for the
home folder) made absolute once, where it enters; everything after that (orbax among it, which
reads nothing from a relative path) sees the absolute path.

`run_or_exit(parser, run, debug)`: runs a command's body; a user error (`USER_ERRORS`: a
`ValueError` naming the argument at fault, an `OSError` such as a missing or unwritable file,
malformed YAML) ends the command with one line `prog: error: ...` on stderr and exit status 2,
as argparse ends a bad argument. With `debug` (the commands' `--debug` flag) the error is
raised with its traceback instead.

`use_compilation_cache()`: what ccq-train, ccq-eval and ccq-demo call first: JAX's persistent
compilation cache in `$XDG_CACHE_HOME/ccq-jax/xla` (default `~/.cache/ccq-jax/xla`), so a second
run of the same programs loads them instead of compiling (the smoke run: 32.6 s cold, 10.2 s
cached). `CCQ_JAX_COMPILATION_CACHE=off` leaves it off, `CCQ_JAX_COMPILATION_CACHE=DIR` puts it in
DIR, and a `JAX_COMPILATION_CACHE_DIR` the user set is kept as it is. Set by the commands at start,
never on import: the library leaves JAX's settings alone.
"""

import argparse
import os
import pathlib
from typing import Callable

import jax
import yaml

CACHE_SWITCH = "CCQ_JAX_COMPILATION_CACHE"  # "off", or the folder to cache compiled programs in
CACHE_OFF = ("off", "0", "false", "no", "none")
USER_ERRORS = (ValueError, OSError, yaml.YAMLError)


def user_path(path) -> pathlib.Path:
    """`path` (str or Path) with `~` expanded, made absolute against the current working directory, `..` folded
    (symbolic links are kept as named)."""
    return pathlib.Path(os.path.abspath(os.path.expanduser(path)))


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true", help="on an error, show its traceback instead of one line")


def error_line(err: BaseException) -> str:
    """One line for a user error: an OSError as "file: reason", anything else its message with line breaks folded."""
    if isinstance(err, OSError) and err.strerror:
        where = err.filename if err.filename is not None else type(err).__name__
        return f"{where}: {err.strerror}"
    return " ".join(str(err).split())


def run_or_exit(parser: argparse.ArgumentParser, run: Callable[[], int], debug: bool, errors: tuple = ()) -> int:
    """`run()`'s exit status; a user error (`USER_ERRORS`, and the command's own `errors`) exits with status 2 and
    one `prog: error: ...` line (raised when `debug`)."""
    try:
        return run()
    except (*USER_ERRORS, *errors) as err:
        if debug:
            raise
        parser.exit(2, f"{parser.prog}: error: {error_line(err)}\n")


def compilation_cache_dir(environ) -> pathlib.Path | None:
    """The folder the commands keep compiled programs in under the environment `environ` (None: no cache of
    theirs): `CCQ_JAX_COMPILATION_CACHE` (off, or a folder), else `$XDG_CACHE_HOME/ccq-jax/xla`, else
    `~/.cache/ccq-jax/xla`; None too when `JAX_COMPILATION_CACHE_DIR` is set (JAX reads it itself)."""
    switch = environ.get(CACHE_SWITCH, "").strip()
    if environ.get("JAX_COMPILATION_CACHE_DIR") or switch.lower() in CACHE_OFF:
        return None
    if switch:
        return user_path(switch)
    return user_path(environ.get("XDG_CACHE_HOME") or "~/.cache") / "ccq-jax" / "xla"


def use_compilation_cache(environ=None) -> pathlib.Path | None:
    """Turn on JAX's persistent compilation cache in `compilation_cache_dir(environ)` (default: os.environ) for this
    process; returns the folder (None: left as it was). For the commands' start, not for library code."""
    path = compilation_cache_dir(os.environ if environ is None else environ)
    if path is not None:
        jax.config.update("jax_compilation_cache_dir", str(path))
    return path
