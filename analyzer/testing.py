"""pytest support: assert which collectives a step compiles to, or that it adds none to a stored snapshot.

Two ways to pin a program's communication in a test suite:

    from analyzer.testing import assert_collectives

    def test_tp_block_only_reduces_over_model(mesh, params, x):
        assert_collectives(block, params, x, mesh=mesh,
                           expected=["AllReduce_model: [B, D]{U_model} -> [B, D]"])

    def test_train_step_adds_no_collectives(collectives_snapshot, mesh, state, batch):
        collectives_snapshot(train_step, state, batch, mesh=mesh)

Importing this module imports pytest (a base dependency); `import analyzer` does not import it.
`collectives_snapshot` is a fixture (this module is a pytest plugin, registered through the `pytest11`
entry point): the first run with `--hlo-snapshot-update` writes the step's collectives (kind, axes,
notation, dtype, bytes, count; never timings) to `__hlo_snapshots__/<test file>/<test name>.json` beside
the test; later runs fail when the step gains a collective, moves more bytes, or runs one more often.
Removals pass (the plan got cheaper) unless `strict=True`; `--hlo-snapshot-update` records the new state.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from analyzer.analysis.report import Report

__all__ = [
    "SNAPSHOT_COLUMNS",
    "SNAPSHOT_VERSION",
    "CollectivesMismatch",
    "collectives_of",
    "assert_collectives",
    "compare_snapshot",
    "SnapshotComparison",
    "collectives_snapshot",
    "pytest_addoption",
]

SNAPSHOT_VERSION = 1
# What a snapshot records per collective: what the program does, not what the cost model predicts.
SNAPSHOT_COLUMNS: tuple[str, ...] = ("kind", "axes", "notation", "dtype", "bytes", "count")
_UPDATE_OPTION = "--hlo-snapshot-update"


class CollectivesMismatch(AssertionError):
    """The collectives of a program differ from what a test expected. `.unexpected` and `.missing` hold rows."""

    def __init__(self, message: str, *, unexpected: Sequence[dict], missing: Sequence[dict]) -> None:
        super().__init__(message)
        self.unexpected = list(unexpected)
        self.missing = list(missing)


def _report(fn_or_report: Any, args: tuple, kwargs: dict) -> Report:
    """A Report as given, or the analysis of `fn(*args)` with analyze's keyword options."""
    from analyzer.analysis.report import Report

    if isinstance(fn_or_report, Report):
        if args:
            raise TypeError("pass either a Report or a function and its arguments, not both")
        return fn_or_report
    from analyzer.pipeline import analyze

    return analyze(fn_or_report, *args, **kwargs)


def _plain(value: Any) -> Any:
    """JSON-friendly, comparable form of a table cell (tuples become lists, numpy scalars Python numbers)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def collectives_of(report: Report) -> list[dict[str, Any]]:
    """The collectives of a report as plain rows of `SNAPSHOT_COLUMNS`, in a stable order.

    Example:
        >>> [row["notation"] for row in collectives_of(report)][:2]
        ['AllReduce_XY: []{U_XY} -> []', 'AllGather_X: [D_X, F_Y] -> [D, F_Y]']
    """
    table = report.collectives
    rows = [{c: _plain(r[c]) for c in SNAPSHOT_COLUMNS} for r in table.to_dict("records")] if len(table) else []
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _matches(row: Mapping[str, Any], want: Any) -> bool:
    """Whether a collective row is what an `expected` item describes.

    An item is a notation string (`"AllGather_Y: [E_Y, F] -> [E, F]"`, spaces ignored), a kind
    (`"all-reduce"`), or a mapping of column -> value that must all match (`{"kind": "all-gather",
    "axes": ("data",)}`).
    """
    if isinstance(want, str):
        if re.fullmatch(r"[a-z-]+", want):
            return row["kind"] == want
        squash = lambda s: re.sub(r"\s+", "", str(s))  # noqa: E731
        return squash(row["notation"]) == squash(want)
    if isinstance(want, Mapping):
        unknown = set(want) - set(row)
        if unknown:
            raise KeyError(f"expected item names unknown columns {sorted(unknown)}; columns: {list(row)}")
        return all(_plain(row[k]) == _plain(v) for k, v in want.items())
    raise TypeError(f"an expected collective is a notation, a kind or a mapping of columns, not {want!r}")


def _describe(row: Mapping[str, Any]) -> str:
    axes = ",".join(row.get("axes") or ()) or "-"
    return f"{row['notation'] or row['kind']}  (axes {axes}, {row['dtype']}, {row['bytes']} B, x{row['count']})"


def assert_collectives(fn_or_report: Any, *args: Any, expected: Iterable[Any] = (), **options: Any) -> Report:
    """Assert that a program compiles to exactly the expected collectives (one item per collective row).

    Args:
      fn_or_report: the function to analyse, or a `Report` already made.
      *args: the function's arguments (arrays or `jax.ShapeDtypeStruct`s with shardings).
      expected: one item per expected collective: a notation string, a kind, or a mapping of columns. Empty
        means "no collectives at all".
      **options: keyword options of `analyzer.analyze` (mesh, target, hardware, topology...).

    Returns:
      the Report, for further checks.

    Raises:
      CollectivesMismatch: listing the collectives nobody expected and the expected ones that are missing.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = jax.make_mesh((8,), ("X",))
        >>> x = jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("X")))
        >>> assert_collectives(lambda x: x.sum(0), x, mesh=mesh, expected=["all-reduce"]).collectives["kind"].tolist()
        ['all-reduce']
    """
    report = _report(fn_or_report, args, options)
    rows = collectives_of(report)
    remaining = list(expected)
    unexpected = []
    for row in rows:
        for i, want in enumerate(remaining):
            if _matches(row, want):
                del remaining[i]
                break
        else:
            unexpected.append(row)
    if unexpected or remaining:
        lines = [f"collectives differ from expected ({len(rows)} found, {len(list(expected))} expected)"]
        lines += [f"  + unexpected: {_describe(r)}" for r in unexpected]
        lines += [f"  - missing:    {w!r}" for w in remaining]
        raise CollectivesMismatch(
            "\n".join(lines), unexpected=unexpected, missing=[w if isinstance(w, dict) else {"item": w} for w in remaining]
        )
    return report


# --------------------------------------------------------------------------------------------------------------
# Snapshots


@dataclass(frozen=True)
class SnapshotComparison:
    """How a program's collectives compare with a stored snapshot.

    Attributes:
      added: rows in the program and not in the snapshot (a new collective, or one that moves more bytes or
        runs more often: the old row is then in `removed`).
      removed: rows in the snapshot that the program no longer has.
    """

    added: tuple[dict, ...]
    removed: tuple[dict, ...]

    @property
    def grew(self) -> bool:
        return bool(self.added)

    def describe(self) -> str:
        lines = [f"  + {_describe(r)}" for r in self.added] + [f"  - {_describe(r)}" for r in self.removed]
        return "\n".join(lines)


def _key(row: Mapping[str, Any]) -> str:
    return json.dumps({c: row.get(c) for c in SNAPSHOT_COLUMNS}, sort_keys=True)


def compare_snapshot(rows: Sequence[Mapping[str, Any]], snapshot: Sequence[Mapping[str, Any]]) -> SnapshotComparison:
    """Multiset difference of collective rows against a snapshot's rows.

    Example:
        >>> compare_snapshot([{"kind": "all-reduce", "axes": ["X"]}], []).added
        ({'axes': ['X'], 'bytes': None, 'count': None, 'dtype': None, 'kind': 'all-reduce', 'notation': None},)
    """
    now = Counter(_key(r) for r in rows)
    before = Counter(_key(r) for r in snapshot)
    added = [json.loads(k) for k, n in (now - before).items() for _ in range(n)]
    removed = [json.loads(k) for k, n in (before - now).items() for _ in range(n)]
    return SnapshotComparison(tuple(added), tuple(removed))


def read_snapshot(path: Path) -> list[dict]:
    """The rows of a snapshot file. A file in another format is an `AnalyzerError` naming it."""
    from analyzer.errors import ConfigError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"snapshot is not JSON: {e.msg}", path=str(path), line=e.lineno, column=e.colno) from None
    if not isinstance(data, dict) or data.get("version") != SNAPSHOT_VERSION or not isinstance(
        data.get("collectives"), list
    ):
        raise ConfigError(
            f"not a collectives snapshot of version {SNAPSHOT_VERSION} (expected an object with 'version' and "
            "'collectives'); rerun pytest with --hlo-snapshot-update to rewrite it",
            path=str(path),
        )
    return data["collectives"]


def write_snapshot(path: Path, rows: Sequence[Mapping[str, Any]], *, name: str = "") -> None:
    """Write rows as a snapshot file (sorted, indented: it is reviewed in diffs)."""
    from analyzer.fileio import write_atomic

    body = {"version": SNAPSHOT_VERSION, "name": name, "collectives": sorted(rows, key=_key)}
    write_atomic(path, json.dumps(body, indent=2, sort_keys=False) + "\n", what="collectives snapshot")


@dataclass
class _Snapshotter:
    """The callable the `collectives_snapshot` fixture returns."""

    directory: Path
    test_name: str
    update: bool
    calls: int = 0

    def path(self, name: str | None = None) -> Path:
        stem = name or (self.test_name if self.calls <= 1 else f"{self.test_name}-{self.calls}")
        return self.directory / (re.sub(r"[^A-Za-z0-9_.\-]+", "_", stem) + ".json")

    def __call__(self, fn_or_report: Any, *args: Any, name: str | None = None, strict: bool = False,
                 **options: Any) -> Report:
        """Compare the program's collectives with the stored snapshot.

        Args:
          fn_or_report: the function (analysed with `args` and `options`) or a `Report`.
          name: snapshot name; default: the test's name (numbered from the second call in one test).
          strict: also fail when collectives were removed.

        Returns:
          the Report.
        """
        self.calls += 1
        report = _report(fn_or_report, args, options)
        rows = collectives_of(report)
        path = self.path(name)
        if self.update:
            write_snapshot(path, rows, name=name or self.test_name)
            return report
        if not path.exists():
            pytest.fail(f"no collectives snapshot at {path}; run pytest with {_UPDATE_OPTION} to record one",
                        pytrace=False)
        diff = compare_snapshot(rows, read_snapshot(path))
        if diff.added or (strict and diff.removed):
            what = "gained collectives" if diff.added else "lost collectives"
            pytest.fail(
                f"{self.test_name}: the program {what} against {path.name}:\n{diff.describe()}\n"
                f"(if intended, rerun with {_UPDATE_OPTION})",
                pytrace=False,
            )
        return report


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds `--hlo-snapshot-update` to pytest's options."""
    group = parser.getgroup("hlo-analyzer")
    group.addoption(
        _UPDATE_OPTION,
        action="store_true",
        default=False,
        help="hlo-analyzer: write the collectives snapshots instead of comparing against them",
    )


@pytest.fixture
def collectives_snapshot(request: pytest.FixtureRequest) -> _Snapshotter:
    """Compare a step's collectives with `__hlo_snapshots__/<test file>/<test>.json`; fail on additions."""
    test_file = Path(str(request.node.path))
    return _Snapshotter(
        directory=test_file.parent / "__hlo_snapshots__" / test_file.stem,
        test_name=request.node.name,
        update=bool(request.config.getoption(_UPDATE_OPTION, default=False)),
    )
