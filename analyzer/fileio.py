"""Files the tool writes: whole or not at all, checked before the work, serialised between processes.

Every file hlo-analyzer writes (reports, baselines, snapshots, traces, `check -o`, the demo's report) goes
through `write_atomic`: the bytes go to a temporary file in the target's folder, are flushed to disk, and
the temporary file is renamed over the target (`os.replace`, atomic on POSIX and Windows within one file
system). A reader sees the old file or the new one, never a mixture; a full disk or a killed process leaves
the old file as it was and no temporary file behind.

What a path names decides how it is written (`write_atomic`, `check_writable`):

- `-`, `/dev/stdout` (and `/dev/fd/1`) mean standard output, `/dev/stderr` (`/dev/fd/2`) standard error;
  `/dev/fd/N` and `/proc/self/fd/N` the open descriptor N. Nothing is created or replaced.
- A character device or a FIFO (`/dev/null`, a named pipe) is written through, as `echo > path` would: it is
  never replaced by a regular file, whoever runs the tool (root included).
- A symbolic link is followed: the file it points to is what gets (atomically) rewritten, and the link stays.
  A link that points nowhere is refused (it could plant a file anywhere the link says).
- A regular file is replaced atomically and keeps its mode (and owner, where the process may set it); a new
  file gets 0o666 less the umask, as `open(path, "w")` would.
- Anything else (a folder, a socket) is refused, before the work.

`check_writable` answers "could we write there?" before a long compile, so a typo in `-o` fails in a
second, not after the work; `refuse_inputs` refuses an output that is one of the run's inputs (the config, the
model's source, the baseline, a hardware spec) before the work. `locked(path)` serialises processes that read,
merge and rewrite one file (two `check --write-baseline` runs on one baseline); its lock file is created
without following a link planted at its name.

`check_input` is the reading side: an input that is not a regular file (a FIFO would block forever,
`/dev/zero` never ends) or is larger than the limit is refused before a byte is read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from analyzer.errors import AnalyzerError, OutputError

__all__ = ["write_atomic", "check_writable", "refuse_inputs", "check_input", "locked", "is_stream",
           "MAX_INPUT_BYTES"]

# Paths that name an open descriptor of this process rather than a file: written to the descriptor.
_STREAMS = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}
_FD_PREFIXES = ("/dev/fd/", "/proc/self/fd/")

# The largest input file read (HLO text, reports, configs): 1 GiB, or HLO_ANALYZER_MAX_INPUT_BYTES.
MAX_INPUT_BYTES = 1 << 30


def _stream_fd(path: str | os.PathLike[str]) -> int | None:
    """The descriptor a stream path names (`-` and `/dev/stdout` 1, `/dev/fd/N` N), else None."""
    text = os.fspath(path)
    if text in _STREAMS:
        return _STREAMS[text]
    for prefix in _FD_PREFIXES:
        if text.startswith(prefix) and text[len(prefix):].isdigit():
            return int(text[len(prefix):])
    return None


def is_stream(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names standard output, standard error or another open descriptor (`-`, `/dev/stdout`,
    `/dev/fd/N`) rather than a file.

    Example:
        >>> is_stream("-"), is_stream("/dev/stdout"), is_stream("report.json")
        (True, True, False)
    """
    return _stream_fd(path) is not None


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def _resolve_output(p: Path, what: str) -> tuple[Path, os.stat_result | None]:
    """The file a write to `p` lands on (a symlink followed) and its stat (None when it does not exist).

    Raises OutputError for a link that points nowhere and for a folder, a socket or a block device."""
    try:
        link = stat.S_ISLNK(os.lstat(p).st_mode)
    except OSError:
        link = False
    target = Path(os.path.realpath(p)) if link else p
    try:
        st = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        if link:
            raise OutputError(f"cannot write {what} {str(p)!r}: it is a symbolic link to {os.readlink(p)!r}, which "
                              "does not exist; remove the link or name the file itself") from None
        return target, None
    except OSError as e:
        raise OutputError(f"cannot write {what} {str(p)!r}: {_reason(e)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {what} {str(p)!r}: a folder of that name exists; pass a file name "
                          f"such as {str(p / 'report.json')!r}")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise OutputError(f"cannot write {what} {str(p)!r}: it is {_kind(st.st_mode)}; name a regular file, a "
                          "FIFO, a character device such as /dev/null, or - for standard output")
    return target, st


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
    if _stream_fd(path) is not None:
        return Path(path)
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise OutputError(f"cannot write {what} {str(path)!r}: it names a folder, not a file")
    target, st = _resolve_output(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):  # a device or FIFO: written through, never replaced
        if not os.access(target, os.W_OK):
            raise OutputError(f"cannot write {what} {str(p)!r}: permission denied")
        return p
    parent = target.parent
    while not parent.exists():
        if parent == parent.parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise OutputError(f"cannot write {what} {str(p)!r}: {str(parent)!r} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{target.name[:40]}.", suffix=".probe")
    except OSError as e:
        raise OutputError(f"cannot write {what} {str(p)!r} in {str(parent)!r}: {_reason(e)}") from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return p


def refuse_inputs(output: str | os.PathLike[str] | None, inputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
                  *, what: str = "output file") -> None:
    """Raise `OutputError` when `output` is the same file as one of the run's `inputs`, before any work.

    Args:
      output: the path the run will write (None or a stream such as `-`: nothing to check).
      inputs: (what it is, path) for each file the run reads: the config, the model's source files, the
        baseline, a hardware spec. None paths and missing files are skipped.

    Example:
        >>> import tempfile
        >>> config = Path(tempfile.mkdtemp()) / "pyproject.toml"
        >>> _ = config.write_text("[tool.hlo-analyzer]\\n")
        >>> refuse_inputs(config, [("config", config)], what="output file (-o)")
        Traceback (most recent call last):
        analyzer.errors.OutputError: refusing to write output file (-o) ...: it is the config this run reads; name another file
    """
    if output is None or _stream_fd(output) is not None:
        return
    out = Path(output)
    try:
        out_stat = os.stat(out)
    except OSError:
        return  # a new file is no input
    if not stat.S_ISREG(out_stat.st_mode):
        return  # a device or FIFO is written through, nothing is replaced
    for kind, path in inputs:
        if path is None:
            continue
        with contextlib.suppress(OSError):
            if os.path.samestat(out_stat, os.stat(path)):
                raise OutputError(f"refusing to write {what} {str(out)!r}: it is the {kind} this run reads; name "
                                  "another file")


def _limit() -> int:
    text = os.environ.get("HLO_ANALYZER_MAX_INPUT_BYTES", "")
    return int(text) if text.isdigit() and int(text) > 0 else MAX_INPUT_BYTES


def check_input(path: str | os.PathLike[str], *, what: str = "input file", limit: int | None = None) -> Path:
    """Raise `AnalyzerError` now when `path` is not a regular file (or folder) that can be read whole.

    A FIFO would block the read forever and `/dev/zero` never ends: anything but a regular file or a folder is
    refused before a byte is read. A file larger than `limit` bytes (default 1 GiB, or the environment's
    HLO_ANALYZER_MAX_INPUT_BYTES) is refused with its size. Missing files pass (the reader says so).

    Example:
        >>> check_input("/dev/zero", what="HLO file")
        Traceback (most recent call last):
        analyzer.errors.AnalyzerError: HLO file '/dev/zero' is a character device, not a regular file; ...
    """
    try:
        st = os.stat(path)
    except OSError:
        return Path(path)
    if stat.S_ISDIR(st.st_mode):
        return Path(path)
    if not stat.S_ISREG(st.st_mode):
        raise AnalyzerError(f"{what} {os.fspath(path)!r} is {_kind(st.st_mode)}, not a regular file; save the "
                            "input to a file first (a pipe or device is not read: it may never end)")
    limit = limit or _limit()
    if st.st_size > limit:
        raise AnalyzerError(f"{what} {os.fspath(path)!r} is {st.st_size:,} bytes, over the limit of {limit:,} "
                            "bytes; set HLO_ANALYZER_MAX_INPUT_BYTES to read larger inputs")
    return Path(path)


def write_atomic(path: str | Path, data: str | bytes, *, encoding: str = "utf-8", what: str = "file") -> Path:
    """Write `data` to `path` whole or not at all (temporary file in the same folder, fsync, rename).

    Missing parent folders are created. The new file gets the mode an ordinary `open(path, "w")` would
    give (the old file's mode when it existed, else 0o666 less the umask). A symbolic link's target is
    rewritten (the link stays); `-`, `/dev/stdout`, `/dev/fd/N`, a character device or a FIFO is written
    through, never replaced (see the module's doc).

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
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    fd = _stream_fd(path)
    if fd is not None:
        _write_fd(fd, payload, str(path), what)
        return Path(path)
    p = Path(path)
    target, st = _resolve_output(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):  # /dev/null, a FIFO: write through, never replace
        try:
            out = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise OutputError(f"cannot write {what} {str(p)!r}: {_reason(e)}") from None
        try:
            _write_fd(out, payload, str(p), what)
        finally:
            os.close(out)
        return p
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the folder of {what} {str(p)!r}: {_reason(e)}") from None
    if st is not None:
        mode = st.st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:40]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if st is not None and hasattr(os, "chown"):  # keep the owner where we may (root rewriting a user's file)
            with contextlib.suppress(OSError):
                os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise OutputError(f"cannot write {what} {str(p)!r}: {_reason(e)}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_folder(target.parent)
    return p


def _write_fd(fd: int, payload: bytes, name: str, what: str) -> None:
    """Write all of `payload` to an open descriptor (standard output, a device, a FIFO)."""
    for stream in (sys.stdout, sys.stderr):  # what Python buffered for that descriptor goes first
        with contextlib.suppress(Exception):
            if stream.fileno() == fd:
                stream.flush()
    view = memoryview(payload)
    try:
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(f"cannot write {what} {name!r}: {_reason(e)}") from None


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
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                         0o644)
        except OSError as e:
            if e.errno == errno.ELOOP or os.path.islink(lock):
                raise OutputError(f"cannot lock {str(p)!r}: the lock file {str(lock)!r} is a symbolic link (not one "
                                  "hlo-analyzer made); remove it") from None
            raise OutputError(f"cannot lock {str(p)!r} (lock file {str(lock)!r}): {_reason(e)}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OutputError(f"cannot lock {str(p)!r}: the lock file {str(lock)!r} is not a regular file; remove it")
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
