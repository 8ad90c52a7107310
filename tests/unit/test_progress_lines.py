"""Off a terminal, a long loop says how far it is and the time left, one line per tenth; a short one says nothing.

The clock is the test's own (``track(clock=...)``), so nothing depends on how fast the machine is.
"""

from __future__ import annotations

import pytest

from subnetlab import progress


@pytest.fixture(autouse=True)
def loud(monkeypatch):
    """The suite runs quiet (tests/conftest.py); these tests read the lines."""
    monkeypatch.setattr(progress, "_quiet", False)


class Clock:
    """Advances ``step`` seconds every time it is read after an item."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("[subnetlab] fine-tuning:")]


def test_a_long_loop_prints_a_line_per_tenth_with_the_time_left(capsys):
    assert list(progress.track(range(100), total=100, description="fine-tuning", clock=Clock(12.0))) == list(range(100))
    lines = _lines(capsys.readouterr().err)  # 12 s per item: every tenth is 120 s, past LINE_SECONDS
    assert len(lines) == 10  # the first after 30 s, then 10% .. 90%; the end is the caller's own stage line
    assert lines[0] == "[subnetlab] fine-tuning: 3/100 (3%), about 19 min left"  # 97 items x 12 s
    assert lines[1] == "[subnetlab] fine-tuning: 10/100 (10%), about 18 min left"
    assert lines[-1] == "[subnetlab] fine-tuning: 90/100 (90%), about 2 min left"


def test_a_short_loop_or_a_quiet_one_prints_nothing(capsys):
    list(progress.track(range(100), total=100, description="fine-tuning", clock=Clock(0.1)))  # 10 s in all
    list(progress.track(range(5), description="fine-tuning", clock=Clock(100.0)))  # no total: no share to print
    progress.set_quiet(True)
    list(progress.track(range(100), total=100, description="fine-tuning", clock=Clock(12.0)))
    assert _lines(capsys.readouterr().err) == []


def test_lines_are_at_least_line_seconds_apart(capsys):
    list(progress.track(range(1000), total=1000, description="fine-tuning", clock=Clock(0.5)))  # 50 s a tenth
    lines = _lines(capsys.readouterr().err)
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["60/1000", "120/1000"] + [f"{k}/1000" for k in range(200, 1000, 100)]  # 100: 20 s after 60


def test_a_loop_whose_tenth_takes_hours_still_prints_every_ten_line_seconds(capsys):
    list(progress.track(range(1000), total=1000, description="fine-tuning", clock=Clock(100.0)))  # a tenth: 10,000 s
    lines = _lines(capsys.readouterr().err)[:4]
    assert [line.split(": ")[1].split(" ")[0] for line in lines] == ["1/1000", "4/1000", "7/1000", "10/1000"]
