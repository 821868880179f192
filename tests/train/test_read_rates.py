"""train.metrics.ReadRates: tokens/s between reads of the calls' metrics, with a read that has no call behind it
reporting the mean rate since the first read (on the H200 such a read found its metrics there already)."""

from pytest import approx

from train.metrics import ReadRates


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_steady_stream_reports_each_interval_and_the_last_read_the_mean_since_the_first():
    clock = Clock()
    rates = ReadRates(start_step=0, tokens_per_step=100, clock=clock)
    clock.now = 30.0  # the first call: 20 steps and the compilation
    assert rates.read(20, behind=True) == 100 * 20 / 30
    clock.now = 32.0  # the GPU's metrics arrive a call late: this read returns when the third call ends
    assert rates.read(40, behind=True) == 100 * 20 / 2
    clock.now = 34.0
    assert rates.read(60, behind=True) == 1000
    clock.now = 34.001  # the last call, read at once: its own interval would claim 2M tokens/s
    assert rates.read(80, behind=False) == approx(100 * 60 / 4.001)


def test_a_read_behind_nothing_before_any_other_read_uses_its_own_interval():
    clock = Clock()
    rates = ReadRates(start_step=10, tokens_per_step=8, clock=clock)
    clock.now = 4.0
    assert rates.read(14, behind=False) == 8 * 4 / 4
    clock.now = 6.0
    assert rates.read(18, behind=True) == 8 * 4 / 2
