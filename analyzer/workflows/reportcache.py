"""`hlo-analyzer report` answered from the result cache (analyzer/workflows/cache.py) when the same analysis is
asked again: the written report's bytes, the line printed and the exit status are stored on a miss and
replayed on a hit, without validating the config, compiling or importing jax.

The key is check's (`cache.key_context`, `KeyContext.entry_key`): the report config as written, the options
that change the result (`--hardware`, `--topology`, `--what-if`) and the output's format, the hardware spec
files, the tool's and Python's versions, the compile environment (`XLA_FLAGS`, `LIBTPU_INIT_ARGS`, `JAX_*`),
the entry point's module and the project modules it imports (by content); and, checked on a hit, every module
file and installed distribution the analysis imported (`cache.record_dependencies`: for a template config
that is the tool's own model code). Only reports written to a file (`-o`) are cached; a terminal report and a
run with `--trace` are always computed. The cache lives at the project root: the nearest folder above the
config holding a pyproject.toml (its `[tool.hlo-analyzer]` `cache`/`cache-dir` apply), else the config's
folder; `--no-cache` or `HLO_ANALYZER_NO_CACHE=1` turn it off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["report_inputs", "ReportCache", "open_report_cache"]


def _entry(config_path: Path, entry: str):
    """The entry point as `ReportConfig.build` finds it: a `path.py:function` not found from the working folder
    is taken against the config's folder."""
    from analyzer.workflows.check import resolve_entry

    module, _, function = entry.partition(":")
    if module.endswith(".py") and not Path(module).is_file() and (config_path.parent / module).is_file():
        entry = f"{config_path.parent / module}:{function}"
    return resolve_entry(entry, config_path.parent)


def report_inputs(config_path: str | os.PathLike[str] | None, entry: str | None,
                  hardware: Sequence[str | None] = ()) -> list[tuple[str, Path | None]]:
    """The files a report or sweep of this config reads, as (what, path) for `analyzer.fileio.refuse_inputs`: the
    config, the entry point's module and the project modules it imports (read with `ast`, nothing imported),
    and every hardware spec file among the given names (the config's `hardware`, `--hardware`, `--what-if`;
    `NAME@SLICE` and packaged names are no files)."""
    from analyzer.workflows.check import local_imports

    out: list[tuple[str, Path | None]] = []
    path = Path(config_path) if config_path else None
    if path is not None:
        out.append(("config", path))
    if isinstance(entry, str) and entry:
        found = _entry(path if path is not None else Path.cwd() / "config.toml", entry)
        if found.file is not None:
            folder = path.parent if path is not None else Path.cwd()
            out += [(f"source of entry point {entry!r}", p) for p in sorted(local_imports(found.file, folder))]
    for name in hardware:
        text = name.partition("@")[0] if isinstance(name, str) else ""
        if text.endswith(".toml") or "/" in text:
            out.append(("hardware spec", Path(text).expanduser()))
    return out


def _project_root(config_path: Path) -> Path:
    for folder in config_path.resolve().parents:
        if (folder / "pyproject.toml").is_file():
            return folder
    return config_path.resolve().parent


@dataclass
class ReportCache:
    """The cache entry one report run reads or writes.

    Attributes:
      cache: the folder's `ResultCache`.
      key: the run's key.
      root: the project root (files recorded relative to it).
      entry_name: what the entry is called (the config's `entry`, else its path).
    """

    cache: Any
    key: str
    root: Path
    entry_name: str

    def replay(self, output: str | os.PathLike[str]) -> tuple[str, int] | None:
        """On a hit: write the stored report to `output`; (the line to print, the exit status). None: a miss."""
        from analyzer.fileio import write_atomic

        hit = self.cache.lookup(self.key, self.root)
        if hit is None:
            return None
        try:
            text, message, code = hit["report"], hit["message"], hit["exit"]
            if not (isinstance(text, str) and isinstance(message, str) and isinstance(code, int)):
                return None
        except (KeyError, TypeError):
            return None
        path = write_atomic(Path(output), text, what="report")
        return message.replace("{path}", str(path)), code

    def store(self, text: str, message: str, code: int) -> None:
        """Keep a computed report (`message` with `{path}` where the written path goes)."""
        from analyzer.workflows.cache import record_dependencies

        self.cache.store(self.key, {"entry": self.entry_name, "report": text, "message": message, "exit": code,
                                    "deps": record_dependencies(self.root)})


def open_report_cache(config_path: str | os.PathLike[str], options: Mapping[str, Any], *,
                      no_cache: bool = False) -> ReportCache | None:
    """The cache entry of a report run, or None when the cache is off or the config does not parse (the full
    load then says why).

    Args:
      config_path: the report config.
      options: the command-line options that change the result (hardware, topology, what-if, format).
      no_cache: `--no-cache`.
    """
    import tomllib

    from analyzer.errors import AnalyzerError
    from analyzer.workflows.cache import cache_settings, key_context, open_cache

    path = Path(config_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    root = _project_root(path)
    table: Mapping[str, Any] = {}
    with_pyproject = root / "pyproject.toml"
    if with_pyproject.is_file():
        try:
            tool = tomllib.loads(with_pyproject.read_text(encoding="utf-8")).get("tool", {})
            table = tool.get("hlo-analyzer", {}) if isinstance(tool, dict) else {}
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            table = {}
    try:
        settings = cache_settings(root, table if isinstance(table, dict) else {}, no_cache=no_cache,
                                  config_path=with_pyproject)
    except AnalyzerError:
        return None
    cache = open_cache(settings)
    if cache is None:
        return None
    from analyzer.workflows.cache import _file_sha

    hardware = data.get("hardware")
    # --what-if names spec files too: by content.
    what_if = {str(n): _file_sha(Path(str(n).partition("@")[0]).expanduser()) for n in options.get("what_if") or ()}
    keys = key_context(root, {"command": "report", "report-config": data, "what-if-files": what_if},
                       config_path=path.resolve(),
                       overrides={**options, "hardware": options.get("hardware") or hardware},
                       cache_folder=settings.folder)
    entry_text = data.get("entry") if isinstance(data.get("entry"), str) else None
    if entry_text:
        from analyzer.workflows.check import local_imports

        entry = _entry(path, entry_text)
        sources = local_imports(entry.file, path.parent) if entry.file is not None else set()
    else:
        from analyzer.workflows.check import EntryPoint

        entry, sources = EntryPoint(str(path.resolve()), None, None), set()
    key, _ = keys.entry_key(entry, sources)
    return ReportCache(cache, key, keys.root, entry.name)
