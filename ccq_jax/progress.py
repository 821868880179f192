"""Progress for long work: a live tqdm bar on a terminal, an occasional whole line in a log.

`progress(...)` takes tqdm's arguments. When standard error is not a terminal (a redirected
run, CI, a job scheduler's log), the bar is redrawn at most every `log_every_s` seconds and
each redraw is written as a line of its own, so a log holds a few readable lines instead of
thousands of carriage-return updates.
"""

import sys

from tqdm import tqdm


class _Lines:
    """A stream for tqdm that turns each carriage-return redraw into one line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str):
        text = text.replace("\r", "").replace("\x1b[A", "")
        if text.strip():
            self.stream.write(text.rstrip("\n") + "\n")

    def flush(self):
        self.stream.flush()


def progress(iterable=None, *, log_every_s: float = 30.0, stream=None, **kwargs) -> tqdm:
    """tqdm(iterable, **kwargs) on a terminal; elsewhere a line every `log_every_s` seconds and one at the end."""
    stream = sys.stderr if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(iterable, file=stream, **kwargs)
    return tqdm(iterable, file=_Lines(stream), mininterval=log_every_s, maxinterval=log_every_s, ascii=True,
                dynamic_ncols=False, ncols=100, **kwargs)
