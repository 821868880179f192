"""What the command lines and the user-facing loaders share: paths a user typed, and how a user error ends a command.

`user_path(p)`: a path as the user wrote it (relative to the working directory, `~` for the
home folder) made absolute once, where it enters; everything after that (orbax among it, which
reads nothing from a relative path) sees the absolute path.

`run_or_exit(parser, run, debug)`: runs a command's body; a user error (`USER_ERRORS`: a
`ValueError` naming the argument at fault, an `OSError` such as a missing or unwritable file,
malformed YAML) ends the command with one line `prog: error: ...` on stderr and exit status 2,
as argparse ends a bad argument. With `debug` (the commands' `--debug` flag) the error is
raised with its traceback instead.
"""

import argparse
import os
import pathlib
from typing import Callable

import yaml

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


def run_or_exit(parser: argparse.ArgumentParser, run: Callable[[], int], debug: bool) -> int:
    """`run()`'s exit status; a user error exits with status 2 and one `prog: error: ...` line (raised when `debug`)."""
    try:
        return run()
    except USER_ERRORS as err:
        if debug:
            raise
        parser.exit(2, f"{parser.prog}: error: {error_line(err)}\n")
