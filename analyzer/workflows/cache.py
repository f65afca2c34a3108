"""The result cache of `hlo-analyzer check`: an entry point whose inputs did not change is not compiled again.

A check's result for one entry point (its findings before the baseline, the totals the JSON output prints,
its plan) is a function of what the key below covers; when none of it changed, the result is read back from
`.hlo-analyzer-cache/` at the project root instead of importing jax and compiling. The folder holds a
`.gitignore` of `*` and a `CACHEDIR.TAG` (https://bford.info/cachedir/), as ruff's and pytest's caches do.

What decides a result, and so the key (`KeyContext`):
  - the entry point's name, its module and every project module it imports (read with `ast`, not executed;
    `analyzer.workflows.check.local_imports`), by content;
  - the `[tool.hlo-analyzer]` table as written, except the keys that only decide the verdict (`baseline`,
    `baseline-tolerance`, `entry-points`) or the cache itself; and the command-line options that change the
    analysis (`--mesh`, `--hardware`, `--target`, `--select`, `--ignore`);
  - the hardware spec files (the packaged ones, and a spec file the config or `--hardware` names), by content;
  - the files matched by the config's `cache-inputs` globs (files an entry point reads at run time), by content;
  - the tool's version, Python's version, the interpreter (`sys.executable`, `sys.prefix`) and `PYTHONPATH`;
  - the environment that changes compilation: `XLA_FLAGS`, `LIBTPU_INIT_ARGS` and every `JAX_*` variable;
  - recorded when the result was computed and checked again before it is used: every module file the
    analysis had imported (project files by content, installed ones by size and modification time) and the
    distributions installed in every site-packages folder those came from, by their `.dist-info` folders'
    names, which carry the versions (jax, jaxlib, libtpu and the project's dependencies among them): an
    install, upgrade or removal there is a miss, checked with one directory listing per folder.

What it cannot see: files an entry point reads at run time that `cache-inputs` does not name, environment
variables other than the ones above that the entry point reads, and the network. `--no-cache` (or
`cache = false`) turns it off; `--clear-cache` empties it.

Entries are written whole (temporary file and rename) and carry a checksum: a damaged, truncated or foreign
entry is a miss, never an error. Two checks at once may both compute and write the same entry (each rename is
atomic); pruning takes a lock and is skipped when another process holds it. The folder is kept under
`MAX_BYTES` by removing the entries used least recently. A folder that cannot be written (a read-only
checkout) leaves the check working without a cache, which it says once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CACHE_DIR", "MAX_BYTES", "ENV_PREFIXES", "ResultCache", "KeyContext", "open_cache", "cache_settings",
           "record_dependencies", "encode_diagnostic", "decode_diagnostic", "Unencodable"]

CACHE_DIR = ".hlo-analyzer-cache"
FORMAT = "hlo-analyzer-cache"
VERSION = 1
# Entries are a few KB (a finding is about 1 KB of JSON) plus the project's source files kept once each for
# explaining the next change; 64 MiB holds thousands of results. Least recently used entries go first.
MAX_BYTES = 64 << 20
ENV_NAMES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "PYTHONPATH")
ENV_PREFIXES = ("JAX_",)
# `[tool.hlo-analyzer]` keys that do not change a result: they decide the verdict (applied afresh on every
# run), select entry points (each has its own key), or configure the cache.
VERDICT_KEYS = frozenset({"baseline", "baseline-tolerance", "baseline_tolerance", "entry-points", "entry_points",
                          "cache", "cache-dir", "cache_dir"})
_SITE_MARKERS = ("site-packages", "dist-packages")
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by hlo-analyzer.\n"
                "# For information about cache directory tags, see:\n"
                "#\thttps://bford.info/cachedir/\n")
GITIGNORE = "# Created by hlo-analyzer automatically.\n*\n"


class Unencodable(Exception):
    """A value the cache cannot store exactly (the result is then not cached)."""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def _file_sha(path: Path) -> str | None:
    try:
        return _sha(path.read_bytes())
    except OSError:
        return None


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _in_site(path: str) -> bool:
    return any(m in path for m in _SITE_MARKERS)


# --------------------------------------------------------------------------------------------------------------
# Settings


@dataclass(frozen=True)
class CacheSettings:
    """Where the cache is, or why there is none.

    Attributes:
      folder: the cache folder, or None when the cache is off.
      why_off: why it is off ("--no-cache", "cache = false in ..."), or None.
    """

    folder: Path | None
    why_off: str | None = None


def cache_settings(root: Path, table: Mapping[str, Any], *, no_cache: bool = False,
                   config_path: Path | None = None) -> CacheSettings:
    """The cache folder for a project: `cache-dir` of the table (relative to the root), else
    `$HLO_ANALYZER_CACHE_DIR`, else `<root>/.hlo-analyzer-cache`; off with `no_cache`, `cache = false`, or
    `HLO_ANALYZER_NO_CACHE=1` (as ruff's RUFF_NO_CACHE).

    Raises:
      ConfigError: `cache` is not true/false or `cache-dir` is not a string.
    """
    from analyzer.errors import ConfigError, find_key_line

    where = str(config_path) if config_path else None

    def bad(message: str, key: str) -> ConfigError:
        line = None
        if config_path is not None:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                line = find_key_line(config_path.read_text(encoding="utf-8"), key, "tool.hlo-analyzer")
        return ConfigError(message, path=where, line=line)

    enabled = table.get("cache", True)
    if not isinstance(enabled, bool):
        raise bad(f"'cache' must be true or false, got {enabled!r}", "cache")
    folder = table.get("cache-dir", table.get("cache_dir"))
    if folder is not None and (not isinstance(folder, str) or not folder.strip()):
        raise bad(f"'cache-dir' must be a folder path (relative to the project root), got {folder!r}", "cache-dir")
    if no_cache:
        return CacheSettings(None, "--no-cache")
    if os.environ.get("HLO_ANALYZER_NO_CACHE", "") not in ("", "0", "false"):
        return CacheSettings(None, "HLO_ANALYZER_NO_CACHE")
    if not enabled:
        return CacheSettings(None, f"cache = false in {where or '[tool.hlo-analyzer]'}")
    if folder is None:
        folder = os.environ.get("HLO_ANALYZER_CACHE_DIR") or CACHE_DIR
    path = Path(folder).expanduser()
    return CacheSettings(path if path.is_absolute() else root / path)


# --------------------------------------------------------------------------------------------------------------
# The key


@dataclass
class KeyContext:
    """What every entry point's key shares, read once per run (no jax, no import of the project's code).

    Attributes:
      root: the project root.
      common: the digest of the shared inputs (see the module docstring).
      inputs: the shared inputs themselves (kept for `describe`).
    """

    root: Path
    common: str
    inputs: dict[str, Any] = field(default_factory=dict)

    def entry_key(self, entry: Any, sources: Iterable[Path]) -> tuple[str, dict[str, str]]:
        """The key of one entry point, and its project files by content ({relative path: sha256}).

        Args:
          entry: the `analyzer.workflows.check.EntryPoint`.
          sources: its module and the project modules it imports (`analyzer.workflows.check.local_imports`);
            empty for an entry point whose file cannot be found without importing it: its key is then its name,
            and the files it imported are checked from the record (`record_dependencies`).
        """
        files: dict[str, str] = {}
        for path in sorted(sources):
            files[_rel(path, self.root)] = _file_sha(path) or "missing"
        key = _sha(_canonical({"common": self.common, "entry": entry.name,
                               "file": _rel(entry.file, self.root) if entry.file else None, "files": files}))
        return key, files


def _hardware_files(values: Iterable[Any], root: Path, base: Path | None = None) -> dict[str, str]:
    """The packaged hardware specs and the spec files among `values`, by content; a relative path is read
    from `base` (the folder the analysis resolves it in; default the current folder)."""
    out: dict[str, str] = {}
    packaged = Path(__file__).parent.parent / "_data" / "hardware"  # analyzer/_data/hardware
    with contextlib.suppress(OSError):
        for p in sorted(packaged.iterdir()):
            if p.is_file():
                out[f"packaged:{p.name}"] = _file_sha(p) or "missing"
    for value in values:
        if not isinstance(value, str):
            continue
        text = value
        if text.endswith(".toml") or "/" in text or "\\" in text:
            p = Path(text).expanduser()
            if base is not None and not p.is_absolute():
                p = base / p
            out[f"file:{text}"] = _file_sha(p) or "missing"
    return out


def _cache_inputs(globs: Any, root: Path, exclude: Path | None) -> dict[str, str]:
    if isinstance(globs, str):
        globs = [globs]
    if not isinstance(globs, list):
        return {"invalid": repr(globs)}
    out: dict[str, str] = {}
    for pattern in globs:
        if not isinstance(pattern, str):
            out[f"invalid:{pattern!r}"] = ""
            continue
        matches = sorted(root.glob(pattern)) if not Path(pattern).is_absolute() else sorted(
            Path(pattern).parent.glob(Path(pattern).name))
        out[f"glob:{pattern}"] = str(len(matches))
        for p in matches:
            if p.is_file() and (exclude is None or exclude not in p.parents):
                out[_rel(p, root)] = _file_sha(p) or "missing"
    return out


def _environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def key_context(root: Path, table: Mapping[str, Any], *, config_path: Path | None,
                overrides: Mapping[str, Any], cache_folder: Path | None = None, label: str | None = None,
                hardware_base: Path | None = None) -> KeyContext:
    """Read what every entry point's key shares.

    Args:
      root: the project root.
      table: the `[tool.hlo-analyzer]` table as parsed from the TOML (not validated: an invalid table never
        produced an entry, so it cannot hit one).
      config_path: the config file.
      overrides: command-line options that change the analysis (name -> the text given), None when not given.
      cache_folder: the cache folder, left out of `cache-inputs` matches.
      label: what names the root in the key instead of its path (the config is then named relative to the
        root): a tree exported to a temporary folder (`diff REV:path`) keys on its contents, not on where it was
        exported.
      hardware_base: the folder relative hardware spec paths are read from (default the current folder).
    """
    from analyzer.version import __version__

    root = root.resolve()
    relevant = {str(k): v for k, v in table.items() if str(k) not in VERDICT_KEYS}
    given = {k: v for k, v in sorted(overrides.items()) if v is not None}
    inputs = {
        "format": [FORMAT, VERSION],
        "tool": __version__,
        "python": [sys.version, sys.implementation.cache_tag, os.path.realpath(sys.executable), sys.prefix],
        "root": label if label is not None else str(root),
        "config": (_rel(config_path, root) if label is not None else str(config_path)) if config_path else None,
        "table": relevant,
        "overrides": given,
        "environment": _environment(),
        "hardware": _hardware_files([table.get("hardware"), given.get("hardware")], root, hardware_base),
        "cache-inputs": _cache_inputs(table.get("cache-inputs", table.get("cache_inputs", [])), root,
                                      cache_folder),
    }
    return KeyContext(root=root, common=_sha(_canonical(inputs)), inputs=inputs)


# --------------------------------------------------------------------------------------------------------------
# What the analysis imported (recorded on a miss, checked on a hit)


def record_dependencies(root: Path, memo: dict[str, Any] | None = None) -> dict[str, Any]:
    """The files and distributions this process has imported, as the record of a result computed in it.

    Project files (under `root`, outside site-packages) by content; other module files by (size, mtime);
    the distributions installed in the site-packages folders they came from (`_distributions`). `memo` is
    kept for callers that record several results in one run.
    """
    import stat as _stat

    root = root.resolve()
    prefixes = tuple({str(root) + os.sep, os.path.abspath(root) + os.sep})
    project: dict[str, str] = {}
    files: list[list[Any]] = []
    seen: set[str] = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not path or path in seen:
            continue
        seen.add(path)
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not _stat.S_ISREG(st.st_mode):
            continue
        full = os.path.abspath(path)
        if not full.startswith(prefixes) and os.path.islink(path):
            full = os.path.realpath(path)
        if full.startswith(prefixes) and not _in_site(full):
            project[_rel(Path(full), root)] = _file_sha(Path(full)) or "missing"
        else:
            files.append([path, st.st_size, st.st_mtime_ns])
    return {"project": dict(sorted(project.items())), "files": sorted(files),
            "dists": _distributions(f[0] for f in files)}


def _site_folder(path: str) -> str | None:
    """The site-packages (or dist-packages) folder a module file lies in, or None."""
    for marker in _SITE_MARKERS:
        at = path.rfind(os.sep + marker + os.sep)
        if at >= 0:
            return path[: at + len(marker) + 1]
    return None


def _installed(folder: str) -> list[str]:
    """The distributions installed in a site folder, by their metadata folders' names (which carry the
    version: `jax-0.10.2.dist-info`): an install, upgrade or removal there changes this list."""
    try:
        return sorted(n for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info")))
    except OSError:
        return []


def _distributions(files: Iterable[str]) -> dict[str, list[str]]:
    """The installed distributions of every site folder an imported module came from (jax, jaxlib, libtpu and
    the project's dependencies among them), by folder."""
    folders = {f for f in map(_site_folder, files) if f is not None}
    return {folder: _installed(folder) for folder in sorted(folders)}


def dependencies_hold(deps: Mapping[str, Any], root: Path) -> bool:
    """Whether the files and distributions a result was computed from are as they were."""
    try:
        for rel, digest in deps["project"].items():
            p = Path(rel)
            if _file_sha(p if p.is_absolute() else root / p) != digest:
                return False
        for path, size, mtime in deps["files"]:
            st = os.stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return False
        for folder, names in deps["dists"].items():
            if _installed(folder) != names:
                return False
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------------------------------------------
# Findings as exact JSON


def _enc(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int:
        return value
    if type(value) is float:
        if value != value or value in (float("inf"), float("-inf")):
            return {"$float": repr(value)}
        return value
    if type(value) is tuple:
        return {"$tuple": [_enc(v) for v in value]}
    if type(value) is list:
        return [_enc(v) for v in value]
    if type(value) is dict and all(isinstance(k, str) for k in value):
        return {"$dict": [[k, _enc(v)] for k, v in value.items()]}
    raise Unencodable(f"{type(value).__name__} {value!r:.60}")


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return [_dec(v) for v in value]
    if isinstance(value, dict):
        if "$tuple" in value:
            return tuple(_dec(v) for v in value["$tuple"])
        if "$dict" in value:
            return {k: _dec(v) for k, v in value["$dict"]}
        if "$float" in value:
            return float(value["$float"])
        raise ValueError("not an encoded value")
    return value


_LOCATION_FIELDS = ("file", "line", "computation", "instruction", "hlo_line", "context")
_DIAGNOSTIC_FIELDS = ("code", "name", "message", "notation", "seconds", "alternative", "alternative_seconds",
                      "saving_seconds", "fix")


def encode_diagnostic(d: Any) -> dict[str, Any]:
    """A Diagnostic as JSON data that `decode_diagnostic` turns back into an equal one.

    Raises:
      Unencodable: a field holds something other than None, bool, int, float, str, tuple, list or a dict with
        string keys (a numpy scalar, say): the result is then not cached rather than cached inexactly.
    """
    out = {f: _enc(getattr(d, f)) for f in _DIAGNOSTIC_FIELDS}
    out["severity"] = d.severity.value
    out["location"] = {f: _enc(getattr(d.location, f)) for f in _LOCATION_FIELDS}
    out["details"] = _enc(dict(d.details))
    return out


def decode_diagnostic(data: Mapping[str, Any]) -> Any:
    from analyzer.diagnostics import Diagnostic, Location, Severity

    location = Location(**{f: _dec(data["location"][f]) for f in _LOCATION_FIELDS})
    return Diagnostic(severity=Severity(data["severity"]), location=location, details=_dec(data["details"]),
                      **{f: _dec(data[f]) for f in _DIAGNOSTIC_FIELDS})


# --------------------------------------------------------------------------------------------------------------
# The folder


class ResultCache:
    """Entries under `<folder>/v1/`: `entries/<key>/<variant>.json` (one per state of the recorded
    dependencies), `last/<entry point digest>` (the entry this entry point's last check used, which the next
    one compares its plan with), `sources/<sha256>` (project files as they were, for showing what changed).

    Attributes:
      folder: the cache folder.
      writable: False once a write failed (read-only checkout): later writes are skipped.
      note: what to tell the user once (why nothing is stored), or None.
    """

    def __init__(self, folder: Path, *, max_bytes: int = MAX_BYTES) -> None:
        self.folder = folder
        self.base = folder / f"v{VERSION}"
        self.max_bytes = max_bytes
        self.writable = True
        self.note: str | None = None

    # -- writing ------------------------------------------------------------------------------------------------

    def _fail(self, error: BaseException) -> None:
        if self.writable:
            self.writable = False
            reason = getattr(error, "message", None) or str(error)
            self.note = (f"results are not cached: cannot write the cache folder {str(self.folder)!r} ({reason}); "
                         "the command runs without it (pass --no-cache or set `cache = false` to say so)")

    def _write(self, path: Path, data: str | bytes) -> bool:
        from analyzer.errors import AnalyzerError
        from analyzer.fileio import write_atomic

        if not self.writable:
            return False
        try:
            self._prepare()
            write_atomic(path, data, what="cache entry")
        except (AnalyzerError, OSError) as e:
            self._fail(e)
            return False
        return True

    def _prepare(self) -> None:
        """Create the folder with its `.gitignore` and `CACHEDIR.TAG` (once)."""
        from analyzer.fileio import write_atomic

        tag = self.folder / "CACHEDIR.TAG"
        if tag.is_file():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomic(self.folder / ".gitignore", GITIGNORE, what="cache .gitignore")
        write_atomic(tag, CACHEDIR_TAG, what="cache tag")

    def store(self, key: str, record: Mapping[str, Any], sources: Mapping[str, Path | bytes] | None = None
              ) -> str | None:
        """Write an entry (and the project files it may later be compared with: {sha256: the file, or its
        bytes}). Returns its variant (the digest of its recorded dependencies), or None when it could not be
        written."""
        body = dict(record)
        body.update(format=FORMAT, version=VERSION, key=key)
        variant = _sha(_canonical(body.get("deps")))[:16]
        body["variant"] = variant
        body["checksum"] = _sha(_canonical({k: v for k, v in body.items() if k != "checksum"}))
        for digest, path in (sources or {}).items():
            blob = self.base / "sources" / digest
            if not blob.exists():
                try:
                    data = path if isinstance(path, bytes) else path.read_bytes()
                except OSError:
                    continue
                if _sha(data) == digest and not self._write(blob, data):
                    return None
            else:
                with contextlib.suppress(OSError):
                    os.utime(blob)
        ok = self._write(self.base / "entries" / key / f"{variant}.json",
                         json.dumps(body, ensure_ascii=False, allow_nan=False))
        if not ok:
            return None
        self.prune()
        return variant

    def remember(self, entry_name: str, key: str, variant: str) -> None:
        """Note the entry this entry point's check used (written only when it changed)."""
        pointer = self.base / "last" / _sha(entry_name.encode())[:32]
        text = json.dumps({"entry": entry_name, "key": key, "variant": variant})
        with contextlib.suppress(OSError):
            if pointer.read_text(encoding="utf-8") == text:
                return
        self._write(pointer, text)

    # -- reading ------------------------------------------------------------------------------------------------

    def _load(self, path: Path, key: str | None = None) -> dict[str, Any] | None:
        """An entry's data when it is whole, ours and for `key`; None otherwise (a miss, never an error)."""
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("version") != VERSION:
                return None
            if key is not None and body.get("key") != key:
                return None
            if body.get("checksum") != _sha(_canonical({k: v for k, v in body.items() if k != "checksum"})):
                return None
        except (OSError, ValueError, UnicodeDecodeError, RecursionError):
            return None
        return body

    def lookup(self, key: str, root: Path) -> dict[str, Any] | None:
        """The entry for `key` whose recorded dependencies still hold, most recently used first; None: a miss."""
        folder = self.base / "entries" / key
        try:
            candidates = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        except OSError:
            return None
        for path in candidates:
            body = self._load(path, key)
            if body is None or not dependencies_hold(body.get("deps") or {}, root):
                continue
            with contextlib.suppress(OSError):  # least recently used goes first when pruning
                os.utime(path)
            return body
        return None

    def previous(self, entry_name: str) -> dict[str, Any] | None:
        """The entry this entry point's last check used, or None."""
        pointer = self.base / "last" / _sha(entry_name.encode())[:32]
        try:
            where = json.loads(pointer.read_text(encoding="utf-8"))
            path = self.base / "entries" / str(where["key"]) / f"{where['variant']}.json"
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            return None
        body = self._load(path, str(where["key"]))
        return body if body is not None and body.get("entry") == entry_name else None

    def source(self, digest: str) -> str | None:
        """A project file as it was, by its sha256, or None."""
        try:
            data = (self.base / "sources" / digest).read_bytes()
        except OSError:
            return None
        if _sha(data) != digest:
            return None
        return data.decode("utf-8", errors="replace")

    # -- bounds -------------------------------------------------------------------------------------------------

    def prune(self) -> int:
        """Remove the least recently used entries and sources until the folder is under 3/4 of `max_bytes`
        (only once it is over it). Skipped when another process is pruning. Returns the files removed."""
        from analyzer.errors import AnalyzerError
        from analyzer.fileio import locked

        files = []
        total = 0
        for sub in ("entries", "sources", "last"):
            for dirpath, _, names in os.walk(self.base / sub):
                for name in names:
                    p = Path(dirpath) / name
                    with contextlib.suppress(OSError):
                        st = p.stat()
                        files.append((st.st_mtime_ns, st.st_size, p))
                        total += st.st_size
        if total <= self.max_bytes:
            return 0
        removed = 0
        try:
            with locked(self.base / "prune", timeout=0):
                files.sort()
                for _, size, p in files:
                    if total <= self.max_bytes * 3 // 4:
                        break
                    with contextlib.suppress(OSError):
                        p.unlink()
                        total -= size
                        removed += 1
                        if p.parent.parent.name == "entries":
                            with contextlib.suppress(OSError):
                                p.parent.rmdir()
        except AnalyzerError:  # another process holds the lock: it prunes
            return 0
        return removed

    def clear(self) -> bool:
        """Remove the cache folder (only a folder that carries our CACHEDIR.TAG). True when one was removed."""
        tag = self.folder / "CACHEDIR.TAG"
        try:
            if "hlo-analyzer" not in tag.read_text(encoding="utf-8"):
                return False
        except OSError:
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        return not self.folder.exists()


def open_cache(settings: CacheSettings) -> ResultCache | None:
    """The cache of these settings (created on the first write), or None when it is off."""
    return ResultCache(settings.folder) if settings.folder is not None else None

