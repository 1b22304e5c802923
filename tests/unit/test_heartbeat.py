"""The progress display's heartbeat and event lines, and the deadline after which a task gets a backup
copy: in process, no Ray (the engine's side is tested on real clusters in integration/faults)."""

from __future__ import annotations

import io
import logging
import time

from raydp.engine import progress
from raydp.engine.grouping import BACKUP_FACTOR, BACKUP_SLACK, Deadlines
from raydp.engine.progress import Progress

OUT = "nothing back for 31 s: 96 blocks outstanding in 6 tasks; 198.18.0.2: 3 tasks running 31 s"


def test_lines_keep_coming_while_nothing_comes_back():
    buf = io.StringIO()
    with_lines = Progress(100, stream=buf, live=False, interval=0.05, delay=0.0)
    assert progress.current() is with_lines
    with_lines.update(10)
    asked = []

    def outstanding():
        asked.append(1)
        return OUT

    with_lines.waiting(0.0, outstanding)  # within the interval: nothing printed, nothing asked
    assert buf.getvalue() == "" and not asked
    for _ in range(2):
        time.sleep(0.06)
        with_lines.waiting(0.06, outstanding)  # no result for an interval: a line saying what is outstanding
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and all(ln.startswith("raydp: 10/100 pairs (10.0%)") and ln.endswith("; " + OUT)
                                   for ln in lines)
    time.sleep(0.06)
    with_lines.update(5)  # results again: the periodic line no longer speaks of waiting
    last = buf.getvalue().splitlines()[-1]
    assert last.startswith("raydp: 15/100") and "nothing back" not in last
    with_lines.note("Ray marked node 198.18.0.2 dead (1 copy of this run's tasks were running there); ...")
    assert buf.getvalue().splitlines()[-1] == ("raydp: Ray marked node 198.18.0.2 dead (1 copy of this run's tasks "
                                              "were running there); ...")
    with_lines.close()
    assert progress.current() is None


def test_a_short_run_says_nothing_and_a_quiet_one_shows_nothing():
    buf = io.StringIO()
    short = Progress(100, stream=buf, live=False, interval=0.0, delay=60.0)
    short.waiting(100.0, lambda: OUT)  # before `delay`: nothing, as for a short run
    short.close()
    assert buf.getvalue() == ""
    off = Progress(100, enabled=False, stream=buf)
    assert progress.current() is None  # a disabled display is never the current one
    off.close()


def test_the_bar_shows_what_is_outstanding_after_a_quiet_spell():
    buf = io.StringIO()
    bar = Progress(100, stream=buf, live=True, delay=0.0)
    bar.update(3)
    time.sleep(1.05)
    bar.waiting(progress.QUIET + 1, lambda: OUT)
    assert OUT in buf.getvalue()
    bar.note("a line above the bar")
    assert "raydp: a line above the bar" in buf.getvalue()
    bar.close()


def test_an_event_without_a_display_is_a_warning(caplog):
    assert progress.current() is None
    with caplog.at_level(logging.WARNING, logger="raydp.engine"):
        progress.note("Ray marked node 198.18.0.3 dead")
    assert [r.getMessage() for r in caplog.records] == ["raydp: Ray marked node 198.18.0.3 dead"]


def test_the_deadline_scales_with_the_blocks_and_with_what_was_seen():
    d = Deadlines()
    assert d.limit(4, None) is None  # nothing measured: no deadline, never a copy on a guess of nothing
    assert d.limit(500, 0.01) == BACKUP_FACTOR * 5.0 + BACKUP_SLACK  # a cheap target's 5 s task: 20 s
    assert d.limit(1, 600.0) == BACKUP_FACTOR * 600.0 + BACKUP_SLACK  # a 10 min evaluation: 30 min
    slack = BACKUP_SLACK
    d.observe(run_seconds=2.0 + slack, blocks=1, block_seconds=1.0)  # within 3x + slack: nothing changes
    assert d.factor == BACKUP_FACTOR
    d.observe(run_seconds=0.5, blocks=1, block_seconds=0.01)  # a tiny task is its fixed costs: ignored
    assert d.factor == BACKUP_FACTOR
    for _ in range(20):
        d.observe(run_seconds=1.0 + slack, blocks=1, block_seconds=1.0)
    d.observe(run_seconds=60.0 + slack, blocks=1, block_seconds=1.0)  # one slow spell among many: no change
    assert d.factor == BACKUP_FACTOR
    for _ in range(10):  # but a target whose tasks often need 4x + slack: its deadline follows
        d.observe(run_seconds=4.0 + slack, blocks=1, block_seconds=1.0)
    assert d.factor == 6.0 and d.limit(1, 1.0) == 6.0 + slack
