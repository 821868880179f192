"""Progress bars: live on a terminal, a few whole lines in a log."""

import io

from ccq_jax.progress import progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_gets_whole_lines_not_carriage_return_updates():
    log = io.StringIO()
    bar = progress(total=1000, desc="train", stream=log, log_every_s=3600)
    for _ in range(1000):
        bar.update(1)
        bar.set_postfix(loss="1.0", refresh=False)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3, lines  # the start and the end, nothing per step
    assert lines[-1].startswith("train: 100%") and "1000/1000" in lines[-1]


def test_a_terminal_gets_a_live_bar():
    screen = _Terminal()
    for _ in progress(range(5), desc="x", stream=screen, mininterval=0):
        pass
    assert "\r" in screen.getvalue()
