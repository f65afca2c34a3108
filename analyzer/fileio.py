"""Files the tool writes: whole or not at all, checked before the work, serialised between processes.

Every file hlo-analyzer writes (reports, baselines, snapshots, traces, `check -o`, the demo's report) goes
through `write_atomic`: the bytes go to a temporary file in the target's folder, are flushed to disk, and
the temporary file is renamed over the target (`os.replace`, atomic on POSIX and Windows within one file
system). A reader sees the old file or the new one, never a mixture; a full disk or a killed process leaves
the old file as it was and no temporary file behind.

`check_writable` answers "could we write there?" before a long compile, so a typo in `-o` fails in a
second, not after the work. `locked(path)` serialises processes that read, merge and rewrite one file
(two `check --write-baseline` runs on one baseline).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from analyzer.errors import OutputError

__all__ = ["write_atomic", "check_writable", "locked"]


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on the device (the old file, if any, is unchanged)"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied (the folder is read-only)"
    return e.strerror or str(e)


def check_writable(path: str | Path, *, what: str = "output file") -> Path:
    """Raise `OutputError` now if `path` could not be written later.

    The path must not be a folder; its nearest existing parent must be a folder (missing folders below it
    are created when the file is written) that this process may create files in. The check creates and
    removes a probe file there, so a read-only mount or a permission the mode bits do not show is caught too.

    Returns:
      the path.

    Example:
        >>> check_writable("/etc/passwd/report.json")
        Traceback (most recent call last):
        analyzer.errors.OutputError: cannot write output file '/etc/passwd/report.json': '/etc/passwd' is a file, not a folder
    """
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise OutputError(f"cannot write {what} {str(path)!r}: it names a folder, not a file")
    if p.is_dir():
        raise OutputError(f"cannot write {what} {str(p)!r}: a folder of that name exists; pass a file name "
                          f"such as {str(p / 'report.json')!r}")
    parent = p.parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {what} {str(p)!r}: {str(parent)!r} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{p.name[:40]}.", suffix=".probe")
    except OSError as e:
        raise OutputError(f"cannot write {what} {str(p)!r} in {str(parent)!r}: {_reason(e)}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return p


def write_atomic(path: str | Path, data: str | bytes, *, encoding: str = "utf-8", what: str = "file") -> Path:
    """Write `data` to `path` whole or not at all (temporary file in the same folder, fsync, rename).

    Missing parent folders are created. The new file gets the mode an ordinary `open(path, "w")` would
    give (the old file's mode when it existed, else 0o666 less the umask).

    Args:
      path: the file to (re)write.
      data: text (encoded with `encoding`) or bytes.
      what: the kind of file, for the error message ("report", "baseline").

    Returns:
      the path written.

    Raises:
      OutputError: the file could not be written (a folder of that name, a read-only folder, a full
        disk...); the old file, if any, is unchanged and no temporary file is left.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_atomic(folder / "out" / "report.json", '{"ok": true}\\n').read_text()
        '{"ok": true}\\n'
        >>> sorted(p.name for p in (folder / "out").iterdir())   # no temporary file left
        ['report.json']
    """
    p = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    if p.is_dir():
        raise OutputError(f"cannot write {what} {str(p)!r}: a folder of that name exists")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the folder of {what} {str(p)!r}: {_reason(e)}") from None
    try:
        mode = os.stat(p).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name[:40]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise OutputError(f"cannot write {what} {str(p)!r}: {_reason(e)}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_folder(p.parent)
    return p


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def locked(path: str | Path, *, timeout: float = 120.0) -> Iterator[None]:
    """Hold an exclusive cross-process lock for `path` (on the file `.<name>.lock` beside it).

    For read-merge-write cycles: two processes that both hold `locked(p)` around "read p, merge, write p"
    cannot lose each other's update. The lock file is removed on release (with the usual check that a
    waiter locked the file that is still in place), so none is left in the user's tree.

    Raises:
      OutputError: the lock could not be taken within `timeout` seconds, or the folder is not writable.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "baseline.json"
        >>> with locked(path):
        ...     write_atomic(path, "[]").name
        'baseline.json'
        >>> sorted(p.name for p in path.parent.iterdir())   # the lock file is gone
        ['baseline.json']
    """
    p = Path(path)
    lock = p.with_name(f".{p.name}.lock")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot lock {str(p)!r}: {_reason(e)}") from None
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: an exclusive-create lock file
        yield from _locked_exclusive_create(lock, p, timeout)
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise OutputError(f"cannot lock {str(p)!r} (lock file {str(lock)!r}): {_reason(e)}") from None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OutputError(f"{str(p)!r} is locked by another hlo-analyzer process "
                                          f"(lock file {str(lock)!r}) for over {timeout:.0f} s") from None
                    time.sleep(0.05)
            # The holder before us may have removed the lock file after we opened it: lock the one in place.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
        except BaseException:
            os.close(fd)
            raise
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock)
            os.close(fd)
        return


def _locked_exclusive_create(lock: Path, p: Path, timeout: float) -> Iterator[None]:  # pragma: no cover
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            if time.monotonic() > deadline:
                raise OutputError(f"{str(p)!r} is locked by another hlo-analyzer process (lock file "
                                  f"{str(lock)!r}); remove the lock file if no such process runs") from None
            time.sleep(0.05)
        except OSError as e:
            raise OutputError(f"cannot lock {str(p)!r}: {_reason(e)}") from None
    try:
        yield
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(lock)
