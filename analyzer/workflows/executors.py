"""Where a sweep's plans are compiled: the executor interface and its Ray implementation.

A sweep is a list of independent compiles (one per plan). `analyzer.workflows.sweep.run_sweep` runs them on
this machine's worker processes by default (`--executor local`); an `Executor` runs them elsewhere. The
interface is one method:

    executor.map(fn, items, lost=..., env=...) -> iterator of (item, result), in completion order

`fn(item)` must be a module-level function (it is sent by reference), `env` holds the environment variables
a worker needs before jax loads there (the fake CPU device count), and `lost(item, why)` builds the result
for an item whose worker died. Results, ranking and output do not depend on the executor: each plan's entry
is computed by the same `fn` from the same item, and the sweep ranks the entries itself.

`RayExecutor` runs each item as a Ray task (one compile per task) that declares the CPUs and memory one
compile needs, so Ray places as many at once as the cluster holds. A task whose worker dies (killed for
memory, a node lost) is submitted once more; if it is lost again, its item alone fails with the reason.
Ray is an optional extra (`ray` in pyproject.toml): `pip install 'ray>=2.40'`.

Example:
    >>> ex = RayExecutor(address=None, cpus=1, memory_bytes=2 << 30)
    >>> run_sweep(config, cands, executor=ex)      # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from analyzer.errors import AnalyzerError, ConfigError

__all__ = ["EXECUTORS", "RAY_INSTALL", "Executor", "ExecutorSpec", "RayExecutor", "RayMissingError",
           "parse_executor", "import_ray"]

EXECUTORS = ("local", "ray")
RAY_INSTALL = "pip install 'ray>=2.40' (hlo-analyzer's `ray` extra)"

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs independent items in parallel, somewhere other than this process."""

    name: str

    def describe(self) -> str:
        """Where the items run, in words (for the progress bar)."""
        ...

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, lost: Callable[[T, str], R],
            env: Mapping[str, str] | None = None) -> Iterator[tuple[T, R]]:
        """Yield `(item, fn(item))` for every item, in completion order; `lost(item, why)` for one whose
        worker died (after any retry)."""
        ...


class RayMissingError(AnalyzerError):
    """`--executor ray` without Ray installed."""


@dataclass(frozen=True)
class ExecutorSpec:
    """`--executor local`, `ray` or `ray:ADDRESS` as checked data.

    Attributes:
      kind: "local" or "ray".
      address: the Ray cluster (`ray://head:10001`, `head:6379`, `auto`); None: `ray.init()`'s default
        (RAY_ADDRESS, else a running local cluster, else a new one on this machine).
    """

    kind: str = "local"
    address: str | None = None


def parse_executor(text: str, *, where: str = "--executor") -> ExecutorSpec:
    """Read `local`, `ray` or `ray:ADDRESS`.

    Raises:
      ConfigError: another name, or `local:...`.

    Example:
      >>> parse_executor("ray:ray://head:10001")
      ExecutorSpec(kind='ray', address='ray://head:10001')
    """
    from analyzer.errors import valid_choices

    kind, sep, address = text.strip().partition(":")
    if kind not in EXECUTORS:
        raise ConfigError(f"{text!r}: unknown executor {kind!r}; "
                          + valid_choices(kind, EXECUTORS, what="executors") + " (ray:ADDRESS for a cluster)",
                          path=where)
    if kind == "local" and sep:
        raise ConfigError(f"{text!r}: 'local' takes no address; write 'local', 'ray' or 'ray:ADDRESS'",
                          path=where)
    if sep and not address.strip():
        raise ConfigError(f"{text!r}: give the cluster after 'ray:', e.g. ray:ray://head:10001, or just 'ray'",
                          path=where)
    return ExecutorSpec(kind, address.strip() or None)


def import_ray() -> Any:
    """The `ray` module.

    Raises:
      RayMissingError: Ray is not installed (with the command that installs it).
    """
    try:
        import ray
    except ImportError as e:
        raise RayMissingError(f"--executor ray needs Ray, which is not installed ({e}); install it with: "
                              f"{RAY_INSTALL}   (or run the sweep with --executor local)") from None
    return ray


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    """The body of a Ray task: one item."""
    return fn(item)


_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB|G|M)?\s*$", re.IGNORECASE)


def parse_memory(text: str | int | float, *, where: str = "--ray-memory") -> int:
    """Bytes from `2GiB`, `1.5G`, `512MiB` or a number of GiB.

    Example:
      >>> parse_memory("1.5GiB")
      1610612736
    """
    m = _MEMORY_RE.match(str(text)) if not isinstance(text, bool) else None
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{text!r}: give memory per compile as a positive size, e.g. 2GiB, 1.5G or 512MiB",
                          path=where)
    unit = (m.group(2) or "GiB").lower()
    scale = {"gib": 1 << 30, "g": 1 << 30, "gb": 10**9, "mib": 1 << 20, "m": 1 << 20, "mb": 10**6}[unit]
    return int(float(m.group(1)) * scale)


@dataclass
class RayExecutor:
    """Each item is one Ray task that asks for `cpus` CPUs and `memory_bytes` of memory.

    Attributes:
      address: the cluster (see `ExecutorSpec`); ignored when Ray is already initialised in this process.
      cpus: CPUs one compile uses (Ray's `num_cpus`).
      memory_bytes: memory one compile may take (Ray's `memory`, a scheduling reservation).
      retries: how many times a task whose worker died is submitted again (1: once).
      retried: items that were submitted again, filled in by `map` (for the caller and for tests).
    """

    address: str | None = None
    cpus: float = 1
    memory_bytes: int = 2 << 30
    retries: int = 1
    name: str = "ray"
    retried: list[Any] = field(default_factory=list)

    def describe(self) -> str:
        where = self.address or "a local Ray"
        return f"as Ray tasks on {where} ({self.cpus:g} CPU, {self.memory_bytes / (1 << 30):.3g} GiB each)"

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, lost: Callable[[T, str], R],
            env: Mapping[str, str] | None = None) -> Iterator[tuple[T, R]]:
        ray = import_ray()
        started = False
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False)
            except Exception as e:  # noqa: BLE001 - Ray's connection errors have no common base class
                raise AnalyzerError(f"cannot start or reach the Ray cluster {self.address or '(local)'}: "
                                    f"{type(e).__name__}: {e}") from None
            started = True
        options: dict[str, Any] = dict(num_cpus=self.cpus, memory=self.memory_bytes, max_retries=0,
                                       name="hlo-analyzer-plan")
        if env:
            # Workers with other variables (another device count) are other processes: Ray keys its worker
            # pool by runtime environment, so jax never starts in a worker with the wrong device count.
            options["runtime_env"] = {"env_vars": dict(env)}
        task = ray.remote(_call).options(**options)
        pending: dict[Any, tuple[T, int]] = {}
        try:
            for item in items:
                pending[task.remote(fn, item)] = (item, 0)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                item, attempt = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as e:  # fn raised: a bug in this plan, not a lost worker
                    yield item, lost(item, f"internal error ({_summary(e)})")
                    continue
                except ray.exceptions.RayError as e:  # the worker or its node died, or the result was lost
                    if attempt < self.retries:
                        self.retried.append(item)
                        pending[task.remote(fn, item)] = (item, attempt + 1)
                        continue
                    yield item, lost(item, f"the Ray worker compiling it died {attempt + 1} times "
                                           f"({type(e).__name__}: {_summary(e)})")
                    continue
                yield item, result
        finally:
            for ref in pending:  # Ctrl-C, or the caller stopped early: cancel what is still queued or running
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort while stopping
                    pass
            if started:
                ray.shutdown()


def _summary(e: BaseException) -> str:
    text = str(e).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(e).__name__
