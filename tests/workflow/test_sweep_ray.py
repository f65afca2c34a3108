"""`hlo-analyzer sweep --executor ray`: the same ranking as the local pool, a killed worker fails only its plan
(after one retry), and without Ray the command stops before any work with the install command.

The Ray tests start a local Ray (`ray.init(num_cpus=2)`) once for the module; they are slow (Ray's start-up
and nine small compiles on each executor) and skipped when Ray is not installed (`pip install '.[ray]'`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.errors import ConfigError
from analyzer.workflows.executors import RAY_INSTALL, ExecutorSpec, parse_executor, parse_memory
from analyzer.workflows.reportconfig import parse_report_config

# Nine plans (3 mesh shapes x 3 strategies) of the smallest template: one bare block, d_model 64.
NINE = """\
name = "nine tiny plans"
strategy = "fsdp"
target = "cpu"
hardware = "tpu-v5e"

[mesh]
data = 4
model = 2

[model]
d_model = 64
d_ff = 128
heads = 4
kv_heads = 2
layers = 1
seq = 16
batch = 16
attention = false

[sweep]
mesh-shapes = ["8x1", "4x2", "2x4"]
strategies = ["dp", "fsdp", "fsdp+tp"]
"""


@pytest.fixture
def nine(tmp_path):
    path = tmp_path / "nine.toml"
    path.write_text(NINE)
    return path


# ---------------------------------------------------------------------------------------------------------------
# Without Ray, and the options' checks (fast)


def test_without_ray_exit_2_with_the_install_command_before_any_work(nine, monkeypatch, capsys):
    import analyzer.workflows.sweep as sweep

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when it is not installed
    compiled = []
    monkeypatch.setattr(sweep, "evaluate", lambda *a, **k: compiled.append(a))
    assert main(["sweep", str(nine), "--executor", "ray", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert RAY_INSTALL in err and "--executor local" in err
    assert compiled == []


def test_config_asks_for_ray_too(nine, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)
    nine.write_text(NINE + 'executor = "ray"\n')
    assert main(["sweep", str(nine), "--no-progress"]) == 2
    assert RAY_INSTALL in capsys.readouterr().err


@pytest.mark.parametrize("text, spec", [
    ("local", ExecutorSpec("local")),
    ("ray", ExecutorSpec("ray")),
    ("ray:ray://head:10001", ExecutorSpec("ray", "ray://head:10001")),
    ("ray:10.0.0.1:6379", ExecutorSpec("ray", "10.0.0.1:6379")),
])
def test_parse_executor(text, spec):
    assert parse_executor(text) == spec


@pytest.mark.parametrize("text, message", [
    ("dask", "valid executors: local, ray"), ("local:host", "'local' takes no address"), ("ray:", "give the cluster after 'ray:'"),
])
def test_bad_executors(text, message, capsys):
    with pytest.raises(ConfigError, match=message):
        parse_executor(text)
    with pytest.raises(SystemExit) as info:
        main(["sweep", "c.toml", "--executor", text])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_parse_memory():
    assert parse_memory("2GiB") == 2 * 2**30 and parse_memory("512MiB") == 512 * 2**20
    assert parse_memory("1.5") == int(1.5 * 2**30) and parse_memory("3GB") == 3 * 10**9
    with pytest.raises(ConfigError, match="positive size"):
        parse_memory("lots")


def test_sweep_table_executor_keys():
    cfg = parse_report_config(NINE + 'executor = "ray"\nray-address = "ray://head:10001"\nray-cpus = 2\n'
                                     'ray-memory = "4GiB"\n')
    assert cfg.sweep_executor == "ray:ray://head:10001"
    assert cfg.sweep_ray_cpus == 2 and cfg.sweep_ray_memory == 4 << 30
    assert parse_report_config(NINE + 'ray-address = "head:6379"\n').sweep_executor == "ray:head:6379"
    with pytest.raises(ConfigError, match="did you mean 'ray'") as e:
        parse_report_config(NINE + 'executor = "rya"\n')
    assert e.value.line == NINE.count("\n") + 1
    with pytest.raises(ConfigError, match="ray-address 'h:1' needs executor"):
        parse_report_config(NINE + 'executor = "local"\nray-address = "h:1"\n')
    with pytest.raises(ConfigError, match="positive number of CPUs"):
        parse_report_config(NINE + "ray-cpus = 0\n")


def test_ray_options_need_the_ray_executor(nine, capsys):
    assert main(["sweep", str(nine), "--ray-cpus", "2", "--no-progress"]) == 2
    assert "apply to --executor ray" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# On a local Ray (slow)


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is not installed: pip install '.[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def local_json(tmp_path_factory):
    """The nine-plan sweep on the local pool (two worker processes), as the JSON file it writes."""
    folder = tmp_path_factory.mktemp("local")
    (folder / "nine.toml").write_text(NINE)
    out = folder / "ranking.json"
    assert main(["sweep", str(folder / "nine.toml"), "--executor", "local", "--jobs", "2", "--no-progress",
                 "-o", str(out)]) == 0
    return out.read_bytes()


@pytest.mark.slow
def test_ray_gives_byte_identical_json(ray_cluster, local_json, tmp_path):
    (tmp_path / "nine.toml").write_text(NINE)
    out = tmp_path / "ranking.json"
    assert main(["sweep", str(tmp_path / "nine.toml"), "--executor", "ray", "--no-progress", "-o", str(out)]) == 0
    assert out.read_bytes() == local_json
    assert b'"best": "dp @ data=' in local_json  # nine analysed plans, not nine failures


def _plan_workers() -> list[int]:
    """Ray worker processes of this session that are running a plan (Ray names them after the task)."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "cmdline").read_bytes().startswith(b"ray::hlo-analyzer-plan"):
                continue
            pid = int(entry.name)
            while pid > 1:  # only descendants of this test process (its Ray)
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if pid == me:
                    found.append(int(entry.name))
                    break
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.slow
def test_a_killed_worker_fails_only_its_plan_and_it_is_retried_once(ray_cluster, local_json):
    import json

    from analyzer.workflows.executors import RayExecutor
    from analyzer.workflows.sweep import candidates, run_sweep

    cfg = parse_report_config(NINE)
    executor = RayExecutor()
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            busy = _plan_workers()
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    result = run_sweep(cfg, candidates(cfg), executor=executor)
    killer.join()
    assert len(killed) == 1
    # The plan the killed worker held was submitted once more (only it), and succeeded: the ranking is the
    # one the local pool gives.
    assert len(executor.retried) == 1
    assert all(e.ok for e in result.entries)
    assert result.to_dict() == json.loads(local_json)["sweep"]


@pytest.mark.slow
def test_a_plan_lost_twice_fails_alone_with_the_reason(ray_cluster):
    from analyzer.workflows.executors import RayExecutor

    def crash_on_odd(n):  # sent by value: the worker dies on odd items, every time
        if n % 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return n * 10

    executor = RayExecutor(memory_bytes=256 << 20)
    done = dict(executor.map(crash_on_odd, [1, 2], lost=lambda n, why: why))
    assert done[2] == 20
    assert "died 2 times" in done[1]
    assert executor.retried == [1]


def test_jobs_is_for_the_local_pool(nine, capsys):
    assert main(["sweep", str(nine), "--executor", "ray", "--jobs", "2", "--no-progress"]) == 2
    assert "--jobs sizes the local worker pool" in capsys.readouterr().err
