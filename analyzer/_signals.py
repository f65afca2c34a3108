"""SIGTERM and SIGHUP end a command like Ctrl-C (issue 27).

`kill`, `timeout`, a CI job's cancellation and `docker stop` send SIGTERM; a closed terminal sends SIGHUP.
Left at their default, either kills the process where it stands: temporary folders (an exported git tree,
XLA's dump of the HLO) stay in $TMPDIR and child processes run on under init. Inside `stop_signals()` they
raise `Terminated`, a `KeyboardInterrupt`, so every cleanup written for Ctrl-C (`finally`, `with`, the sweep's
worker shutdown, `subprocess.run` stopping its child) runs, and the command exits 128 + the signal's number
(143, 129), what a shell reports for a process the signal stopped.

Only the command line (and the worker processes it starts) installs the handlers, in the main thread, and
puts back the ones it found: a library call leaves its host's handlers alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "stop_signals"]


class Terminated(KeyboardInterrupt):
    """The process was asked to stop (SIGTERM, SIGHUP); `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Inside: SIGTERM and SIGHUP raise `Terminated` in the main thread; the old handlers are back after.

    A signal that was ignored when the block starts (`nohup`) stays ignored. Once one arrives, further ones
    are ignored until the block ends, so that a second `kill` does not cut the cleanup short.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, object] = {}

    def handler(signum: int, frame: object) -> None:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:  # pragma: no cover - Windows has no SIGHUP
            continue
        old = signal.getsignal(sig)
        if old == signal.SIG_IGN:
            continue
        previous[sig] = old
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
