"""Test session set-up shared by every test folder.

jax reads XLA_FLAGS and JAX_PLATFORMS once, when it first initialises, so they are set here, before any
test imports it: 64 fake CPU devices let the tests' meshes of up to 64 devices compile in this process (larger
ones go through the analyzer's subprocess path, which tests/lower/test_lower.py checks with a mesh twice the
process's devices), and JAX_PLATFORMS=cpu keeps an installed libtpu from probing for TPU chips that this machine
does not have. 64 rather than 8: the rules' tests on 16- to 64-device meshes (e.g. five in tests/rules/test_rules.py)
compiled each in a child process that imported jax again (test_rules.py 32.5 -> 19.3 s CPU, no child left), while
an 8-device compile costs the same with 64 devices in the process; both stacks' suites pass alike.

The CPU compiler's LLVM back end is told not to optimise (`--xla_backend_optimization_level=0`,
`--xla_llvm_disable_expensive_passes`): the analyzer reads the HLO text and the buffer assignment, which the
back end's optimisation level leaves byte-identical (checked on jax 0.10 and 0.12: optimized and after-SPMD HLO
and the memory figures of the template's fsdp+tp step), while a test program's compile takes a half to a fifth
of the time. Only the few tests that run a program get slower code, on arrays of a few kB. On jaxlib 0.10 the CPU
compiler also goes without its MLIR fusion emitters (`--xla_cpu_use_fusion_emitters=false`), which spent most of
each compile building a pass pipeline per fusion: a lone elementwise op then stays an op instead of a one-op
`wrapped_*` loop fusion in the final HLO (as jaxlib 0.12's compiler leaves it), while the after-SPMD HLO and
every report figure stay the same (checked on jax 0.10: report_to_dict of 12 reports, four chapter steps and four
third-party programs under two plans, identical but the CPU compiler's temp bytes of GPT-2, 176,251,536 ->
176,251,728; the whole suite passes but for the fixture generator's check, which runs without it); the compiles
take about a quarter of the time (19.3 -> 5.4 s CPU for eight programs; tests/thirdparty 122 -> 66 s CPU). Set
HLO_ANALYZER_TEST_LLVM_OPT=1 to compile as a user's process does.

`pytest --count-compiles` prints, after the run, how often each program was compiled and by which tests (a
program compiled twice is a candidate for a session fixture: the `planned` pattern below).

The suite runs on two worker processes (pytest-xdist; `--numprocesses=2 --dist=loadfile --no-loadscope-reorder`
in pyproject.toml's addopts), each a test session of its own with the settings above (set here, in each process,
before jax loads): a test file stays in one worker, so its module fixtures and module-level cold runs happen once,
while a session fixture is built in each worker that needs it. Each worker takes its files in the order of a
serial run: a worker's tests see what a serial run's would have seen before them (MaxText, once imported by
tests/workflow/test_maxtext*.py, leaves `jax.lax.with_sharding_constraint` replaced by a wrapper of its own for the
rest of the process, which moves the constraint lines that tests/analysis and tests/rules check). `-n 0` runs the suite in this process, as does `-p no:xdist`
(or an environment without pytest-xdist: the options are then accepted and ignored, and the header says so).
`--cpu-durations` and `--count-compiles` gather the workers' figures in the controlling process.
"""

import os

# jaxlib 0.10's CPU compiler without its MLIR fusion emitters (see above); tests/lower/test_fixtures.py takes it out
# of the fixture generator's flags, whose committed final HLO was compiled with them
NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=64").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if not os.environ.get("HLO_ANALYZER_TEST_LLVM_OPT"):
    _FASTER = ["--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true"]
    from importlib.metadata import PackageNotFoundError, version

    try:
        _jaxlib = tuple(int(x) for x in version("jaxlib").split(".")[:2])
    except (PackageNotFoundError, ValueError):  # no jaxlib metadata: only the flags that every XLA knows
        _jaxlib = (99,)
    if _jaxlib < (0, 11):  # jaxlib 0.10's CPU compiler only (0.12's XLA has no such flag and stops on an unknown one)
        _FASTER.append(NO_FUSION_EMITTERS)
    for _fast in _FASTER:
        if _fast.split("=")[0] not in os.environ["XLA_FLAGS"]:
            os.environ["XLA_FLAGS"] += f" {_fast}"


import pytest  # noqa: E402

# `pytester` runs a user's pytest session inside this process (tests/workflow/test_testing.py: the snapshot
# plugin), where a child pytest would import jax and the analyzer again.
pytest_plugins = ("pytester",)


@pytest.fixture(scope="session")
def planned():
    """`planned("replicated_batch")` -> the Report of that plan of tests/rules/plans.py (one small MLP step,
    several plans; "embedding" is its `embedding_plan()`), analysed once per session for the analysis and the
    rule tests."""
    import importlib.util
    from pathlib import Path

    import analyzer

    spec = importlib.util.spec_from_file_location("_plans", Path(__file__).parent / "rules" / "plans.py")
    plans = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plans)
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            fn, args, kwargs = plans.embedding_plan() if name == "embedding" else plans.plan(name)
            cache[name] = analyzer.analyze(fn, *args, **kwargs)
        return cache[name]

    get.plans = plans
    return get


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("xdist"):  # not installed, or `-p no:xdist`: pyproject's addopts still parse
        group = parser.getgroup("xdist", "pytest-xdist is not loaded: the suite runs in this process")
        group.addoption("--numprocesses", default=None, help="ignored without pytest-xdist")
        group.addoption("--dist", default="no", help="ignored without pytest-xdist")
        group.addoption("--no-loadscope-reorder", action="store_true", help="ignored without pytest-xdist")
    parser.addoption("--count-compiles", action="store_true",
                     help="after the run, list each program compiled more than once and the tests that did it")
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="after the run, list the N tests that used the most CPU time (this process and the "
                          "child processes it waited for; setup, call and teardown together), and the sum per file")


class _Gathered:
    """A report plugin whose rows are made where the tests run: an xdist worker hands its rows to the controlling
    process at the end of its session (`workeroutput`), which adds them to its own and prints the summary."""

    key = ""
    rows: list

    def pytest_sessionfinish(self, session):
        output = getattr(session.config, "workeroutput", None)
        if output is not None:  # this process is an xdist worker
            output[self.key] = [list(row) for row in self.rows]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.rows.extend(tuple(row) for row in getattr(node, "workeroutput", {}).get(self.key, ()))


class _CompileCounter(_Gathered):
    """Counts the analyzer's compiles (in this process and in its child processes) by program, keyed by the
    StableHLO text without its source locations, the platform, the device ids and the XLA flags: two tests
    that compile the same program on the same devices show up as one key with two tests."""

    key = "hlo_analyzer_compiles"

    def __init__(self):
        self.node = None
        self.rows: list[tuple[str, str, str, float]] = []  # (key, module name, test id, seconds)

    def install(self, lower):
        """Wraps analyzer.compile.lower's two compile paths for the rest of the session."""
        import hashlib
        import re
        import time

        def counted(original):
            def run(job, *args, **kwargs):
                start = time.perf_counter()
                try:
                    return original(job, *args, **kwargs)
                finally:
                    text = "\n".join(str(job.get(k)) for k in ("stablehlo", "platform", "device_ids", "xla_flags"))
                    text = re.sub(r"^#loc.*$|\s*loc\(#loc\d*\)", "", text, flags=re.M)  # the call site is
                    # part of a location: the same program traced from two tests differs only there
                    self.rows.append((hashlib.sha1(text.encode()).hexdigest()[:12],
                                      lower._module_name(job.get("stablehlo", "")), self.node or "?",
                                      time.perf_counter() - start))
            return run

        lower._compile_job = counted(lower._compile_job)
        lower._compile_in_child = counted(lower._compile_in_child)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.node = item.nodeid
        yield
        self.node = None

    def pytest_terminal_summary(self, terminalreporter):
        from collections import defaultdict

        by_key: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
        for key, name, node, seconds in self.rows:
            by_key[key].append((name, node, seconds))
        repeats = {k: v for k, v in by_key.items() if len(v) > 1}
        write = terminalreporter.write_line
        write(f"compiles: {len(self.rows)} of {len(by_key)} programs, {sum(s for *_, s in self.rows):.1f} s; "
              f"{sum(len(v) - 1 for v in repeats.values())} repeats")
        for key, rows in sorted(repeats.items(), key=lambda kv: -sum(s for *_, s in kv[1])):
            write(f"  {rows[0][0]} [{key}] x{len(rows)}, {sum(s for *_, s in rows):.1f} s:")
            for _, node, seconds in rows:
                write(f"    {seconds:6.1f} s  {node}")


class _CpuTimer(_Gathered):
    """CPU seconds per test, this process's and its waited-for children's (`resource.getrusage`): on a shared
    machine wall time measures the neighbours, CPU time the test. Under xdist it also says when each worker was
    busy (from the start of the session): a worker that ends long before the other is time the split lost."""

    key = "hlo_analyzer_cpu"

    def __init__(self, top: int):
        import time

        self.top = top
        self.start = time.time()
        # (own, children's seconds, test id, worker, wall-clock start, end)
        self.rows: list[tuple[float, float, str, str, float, float]] = []

    @staticmethod
    def _now() -> tuple[float, float]:
        import resource

        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        import time

        own, kids = self._now()
        start = time.time()
        yield
        own2, kids2 = self._now()
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.rows.append((own2 - own, kids2 - kids, item.nodeid, worker, start, time.time()))

    def pytest_terminal_summary(self, terminalreporter):
        from collections import defaultdict

        write = terminalreporter.write_line
        total = sum(r[0] + r[1] for r in self.rows)
        write(f"CPU time of the tests: {total:.1f} s ({sum(r[1] for r in self.rows):.1f} s in child processes)")
        workers = sorted({r[3] for r in self.rows})
        for worker in workers if len(workers) > 1 else ():
            mine = [r for r in self.rows if r[3] == worker]
            write(f"  worker {worker}: {len(mine)} tests, {sum(r[0] + r[1] for r in mine):.1f} s cpu, busy from "
                  f"{min(r[4] for r in mine) - self.start:.1f} s to {max(r[5] for r in mine) - self.start:.1f} s")
        for own, kids, node, *_ in sorted(self.rows, key=lambda r: -(r[0] + r[1]))[:self.top]:
            write(f"  {own + kids:7.2f} s cpu ({kids:6.2f} s children)  {node}")
        per_file: dict[str, float] = defaultdict(float)
        for own, kids, node, *_ in self.rows:
            per_file[node.split("::")[0]] += own + kids
        write("CPU time per file:")
        for name, seconds in sorted(per_file.items(), key=lambda kv: -kv[1]):
            write(f"  {seconds:7.1f} s  {name}")


def pytest_report_header(config):
    if not config.pluginmanager.has_plugin("xdist"):
        return "pytest-xdist not loaded: the tests run in this one process"
    return None


def pytest_configure(config):
    if config.getoption("--cpu-durations") is not None:
        config.pluginmanager.register(_CpuTimer(config.getoption("--cpu-durations")), "hlo-analyzer-cpu-timer")
    if config.getoption("--count-compiles"):
        from analyzer.compile import lower

        counter = _CompileCounter()
        counter.install(lower)
        config.pluginmanager.register(counter, "hlo-analyzer-compile-counter")
