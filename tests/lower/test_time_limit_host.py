"""A time limit leaves its host as it found it: the caller's `sys.unraisablehook` and SIGALRM handler are theirs
again when the block ends, whether it finished or timed out (an earlier version left its hook installed for good)."""

from __future__ import annotations

import signal
import sys
import threading
import time

import pytest

from analyzer.compile.lower import time_limit
from analyzer.errors import CompileTimeout


def _mine(unraisable):  # pragma: no cover - only compared by identity
    pass


@pytest.mark.parametrize("times_out", [False, True])
def test_time_limit_puts_the_callers_hooks_back(monkeypatch, times_out):
    monkeypatch.setattr(sys, "unraisablehook", _mine)
    alarm = signal.getsignal(signal.SIGALRM)
    if times_out:
        with pytest.raises(CompileTimeout):
            with time_limit(0.05, "m:f"):
                time.sleep(2)
    else:
        with time_limit(5, "m:f"):
            assert sys.unraisablehook is not _mine  # (quieted while the limit runs)
    assert sys.unraisablehook is _mine
    assert signal.getsignal(signal.SIGALRM) is alarm


def test_time_limit_in_a_thread_puts_the_hook_back(monkeypatch):
    monkeypatch.setattr(sys, "unraisablehook", _mine)
    errors = []

    def run():
        try:
            with time_limit(0.05, "m:f"):
                for _ in range(2000):  # (stopped by the limit long before its 20 s)
                    time.sleep(0.01)
        except CompileTimeout as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    assert errors and sys.unraisablehook is _mine
