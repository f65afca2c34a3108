"""The result cache of `hlo-analyzer check` (analyzer/workflows/cache.py), through the command line, without
compiling: the analysis is replaced by a counting fake (as in test_check.py), so each test sees whether the
check computed or read back. tests/workflow/test_cache_real.py does the same on real compiles in child
processes (no jax on a hit, a spec change named with its line, concurrent checks).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.workflows import cache as cache_mod
from analyzer.workflows import check

FORMATS = ("text", "json", "github", "sarif")


@pytest.fixture
def counted(monkeypatch, project, make_report, finding):
    """The project's check with a fake analysis that counts its calls; the environment the key reads is fixed."""
    calls: list[str] = []
    found = {"model.train:step": [finding(file=str(project / "model" / "layers.py"), line=2)]}

    def analyse(entry, config, mesh=None):
        calls.append(entry.name)
        return make_report(diagnostics=found.get(entry.name, ()), name=entry.name)

    monkeypatch.setattr(check, "analyse_entry", analyse)
    monkeypatch.delenv("HLO_ANALYZER_NO_CACHE", raising=False)
    monkeypatch.delenv("HLO_ANALYZER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.chdir(project)
    return calls


def run(capsys, *argv):
    code = main(["check", "--jobs", "1", *argv])  # in this process, where the fake counts
    out, err = capsys.readouterr()
    return code, out, err


def test_the_folder_is_tagged_and_ignored_and_a_hit_replays_the_miss(counted, project, capsys):
    for fmt in FORMATS:
        code, miss, _ = run(capsys, "--clear-cache", "--output-format", fmt)
        assert code == 1
        code, hit, _ = run(capsys, "--output-format", fmt)
        assert code == 1
        assert hit == miss, fmt
    assert counted.count("model.train:step") == len(FORMATS)  # one compute per clear, none for the hits
    folder = project / ".hlo-analyzer-cache"
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert (folder / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")


def test_the_baseline_is_applied_afresh_on_a_hit(counted, project, capsys):
    assert run(capsys)[0] == 1
    assert main(["check", "--jobs", "1", "--write-baseline"]) == 0
    capsys.readouterr()
    n = len(counted)
    code, out, _ = run(capsys, "--baseline", ".hlo-analyzer-baseline.json")
    assert code == 0 and "1 baselined" in out
    assert len(counted) == n  # the baseline is not part of the key
    (project / ".hlo-analyzer-baseline.json").unlink()
    assert run(capsys)[0] == 1 and len(counted) == n


def test_no_cache_and_config_switches(counted, project, capsys):
    run(capsys)
    run(capsys, "--no-cache")
    assert len(counted) == 2 * 2  # both entry points computed again
    with open(project / "pyproject.toml", "a") as f:
        f.write('cache-dir = "build/hlo-cache"\n')
    run(capsys)
    assert (project / "build" / "hlo-cache" / "CACHEDIR.TAG").is_file()
    n = len(counted)
    run(capsys)
    assert len(counted) == n
    with open(project / "pyproject.toml", "a") as f:
        f.write("cache = false\n")
    run(capsys)
    run(capsys)
    assert len(counted) == n + 4


def test_a_bad_cache_key_in_the_config_is_named_with_its_line(counted, project, capsys):
    with open(project / "pyproject.toml", "a") as f:
        f.write('cache = "yes"\n')
    code, _, err = run(capsys)
    assert code == 2 and "'cache' must be true or false" in err and "pyproject.toml:7" in err


EDITS = {
    "imported module": lambda p: (p / "model" / "layers.py", "def mlp(x):\n    return x + 1\n"),
    "entry module": lambda p: (p / "model" / "train.py", (p / "model" / "train.py").read_text() + "# edited\n"),
    "config": lambda p: (p / "pyproject.toml", (p / "pyproject.toml").read_text()
                         .replace("mesh = { X = 4, Y = 2 }", "mesh = { X = 2, Y = 4 }")),
    "hardware file": lambda p: (p / "hw.toml", (p / "hw.toml").read_text() + "# edited\n"),
    "cache-inputs file": lambda p: (p / "sizes" / "model.yaml", "d_model: 512\n"),
}


@pytest.fixture
def keyed(counted, project, tmp_path):
    """The project with a hardware spec file and a cache-inputs file named in its config."""
    (project / "hw.toml").write_text("# a spec file the config names\n")
    (project / "sizes").mkdir()
    (project / "sizes" / "model.yaml").write_text("d_model: 256\n")
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text + 'cache-inputs = ["sizes/*.yaml"]\n')
    # The key reads the named hardware file; the fake analysis never loads it.
    monkey_hw = cache_mod._hardware_files

    def with_spec(values, root, *base):
        return monkey_hw([*values, str(project / "hw.toml")], root, *base)

    cache_mod._hardware_files = with_spec
    yield counted
    cache_mod._hardware_files = monkey_hw


@pytest.mark.parametrize("what", sorted(EDITS))
def test_each_input_of_the_key_changed_alone_recomputes_and_reverting_hits(keyed, project, capsys, what):
    first = run(capsys)
    assert len(keyed) == 2
    path, text = EDITS[what](project)
    before = path.read_text()
    path.write_text(text)
    run(capsys)
    assert len(keyed) > 2, f"a change of the {what} must recompute"
    n = len(keyed)
    path.write_text(before)
    assert run(capsys)[:2] == first[:2]
    assert len(keyed) == n, f"reverting the {what} must give the first result back from the cache"


@pytest.mark.parametrize("name, value", [("XLA_FLAGS", "--xla_force_host_platform_device_count=8 "
                                          "--xla_cpu_enable_fast_math=false"), ("JAX_ENABLE_X64", "1"),
                                         ("LIBTPU_INIT_ARGS", "--xla_tpu_enable_async_collective_fusion=true")])
def test_an_environment_variable_that_changes_compilation_recomputes(counted, capsys, monkeypatch, name, value):
    first = run(capsys)
    before = os.environ.get(name)
    monkeypatch.setenv(name, value)
    run(capsys)
    assert len(counted) == 4
    if before is None:
        monkeypatch.delenv(name)
    else:
        monkeypatch.setenv(name, before)
    assert run(capsys)[:2] == first[:2] and len(counted) == 4


def test_a_file_no_entry_point_reads_does_not_recompute(counted, project, capsys):
    run(capsys)
    (project / "notes.py").write_text("x = 1\n")
    (project / "README.md").write_text("# sample\n")
    run(capsys)
    assert len(counted) == 2
    # other.py is read by `other:step` only: the other entry point is still answered from the cache.
    (project / "other.py").write_text((project / "other.py").read_text() + "# edited\n")
    run(capsys)
    assert counted[2:] == ["other:step"]


def test_a_command_line_option_is_part_of_the_key(counted, capsys):
    run(capsys)
    run(capsys, "--ignore", "HA202")
    assert len(counted) == 4
    run(capsys)
    assert len(counted) == 4


def test_an_installed_distribution_changed_recomputes(counted, project, tmp_path, capsys, monkeypatch):
    site = tmp_path / "site" / "site-packages"
    (site / "fakedist").mkdir(parents=True)
    (site / "fakedist" / "__init__.py").write_text("VERSION = '1.0'\n")
    info = site / "fakedist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedist\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("fakedist\n")
    (info / "RECORD").write_text("fakedist/__init__.py,,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "fakedist", raising=False)
    import fakedist  # noqa: F401 - the analysis "imported" it: the record lists its distribution

    first = run(capsys)
    assert any("fakedist-1.0.dist-info" in names for names in _entries(project)[0]["deps"]["dists"].values())
    info.rename(site / "fakedist-2.0.dist-info")  # pip install fakedist==2.0 (same files)
    run(capsys)
    assert len(counted) == 4
    (site / "fakedist-2.0.dist-info").rename(info)
    assert run(capsys)[:2] == first[:2] and len(counted) == 4


def _entries(project: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((project / ".hlo-analyzer-cache").rglob("entries/*/*.json"))]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign", "checksum", "empty"])
def test_a_damaged_or_foreign_entry_is_a_miss_not_an_error(counted, project, capsys, damage):
    first = run(capsys)
    files = sorted((project / ".hlo-analyzer-cache").rglob("entries/*/*.json"))
    assert len(files) == 2
    for f in files:
        text = f.read_text()
        if damage == "truncate":
            f.write_text(text[: len(text) // 2])
        elif damage == "garbage":
            f.write_bytes(b"\x00\xff" * 100)
        elif damage == "foreign":
            f.write_text(json.dumps({"format": "something-else", "version": 1}))
        elif damage == "checksum":
            body = json.loads(text)
            body["totals"]["comm_seconds"] += 1.0  # an edited figure: the checksum no longer matches
            f.write_text(json.dumps(body))
        else:
            f.write_text("")
    again = run(capsys)
    assert again[:2] == first[:2]
    assert len(counted) == 4  # recomputed, and stored whole again
    assert run(capsys)[:2] == first[:2] and len(counted) == 4


def test_a_read_only_project_works_without_the_cache_and_says_so_once(counted, project, capsys, monkeypatch):
    from analyzer import fileio
    from analyzer.errors import OutputError

    real = fileio.write_atomic

    def read_only(path, data, **kw):
        if ".hlo-analyzer-cache" in str(path):
            raise OutputError(f"cannot write cache entry {str(path)!r}: permission denied (the folder is read-only)")
        return real(path, data, **kw)

    monkeypatch.setattr(fileio, "write_atomic", read_only)
    code, out, err = run(capsys)
    assert code == 1 and "HA102" in out
    assert err.count("results are not cached") == 1 and "read-only" in err
    assert run(capsys)[0] == 1 and len(counted) == 4  # nothing kept: computed again, still correct


def test_the_folder_is_bounded(tmp_path):
    cache = cache_mod.ResultCache(tmp_path / "c", max_bytes=20_000)
    for i in range(40):
        assert cache.store(f"{i:064x}", {"entry": "e", "deps": {"i": i}, "blob": "x" * 1000}) is not None
        os.utime(next((tmp_path / "c" / "v1" / "entries" / f"{i:064x}").iterdir()), ns=(i * 10**9, i * 10**9))
    kept = sorted(p.parent.name for p in (tmp_path / "c").rglob("entries/*/*.json"))
    total = sum(p.stat().st_size for p in (tmp_path / "c" / "v1").rglob("*") if p.is_file())
    assert total <= 20_000 and f"{39:064x}" in kept and f"{0:064x}" not in kept  # the oldest went first


def test_clear_removes_only_a_tagged_folder(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "data.txt").write_text("not a cache")
    assert not cache_mod.ResultCache(tmp_path / "mine").clear()
    assert (tmp_path / "mine" / "data.txt").exists()


def test_findings_round_trip_exactly(finding):
    d = finding(file="m.py", line=3)
    d = type(d)(**{**d.__dict__, "details": {"axes": ("data", "model"), "bytes": 2**40, "nested": {"x": [1.5, None]},
                                            "nan": float("nan")}})
    back = cache_mod.decode_diagnostic(json.loads(json.dumps(cache_mod.encode_diagnostic(d))))
    assert back.details["axes"] == ("data", "model") and back.details["nested"] == {"x": [1.5, None]}
    assert back.message == d.message and back.location == d.location and back.fingerprint() == d.fingerprint()
    with pytest.raises(cache_mod.Unencodable):
        cache_mod.encode_diagnostic(type(d)(**{**d.__dict__, "details": {"obj": object()}}))


def test_the_changed_decision_is_named_from_the_previous_result(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        def step(mesh):
            params = {"w_in": P(None, "model"), "w_out": P("model", None)}
            return f, (params, x)
        """))
    old_sha = cache_mod._file_sha(tmp_path / "train.py")
    store = cache_mod.ResultCache(tmp_path / "c")
    store.store("0" * 64, {"entry": "train:step", "deps": {}}, {old_sha: tmp_path / "train.py"})
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text().replace('P("model", None)}',
                                                                                   'P(None, "model")}'))
    new_sha = cache_mod._file_sha(tmp_path / "train.py")
    gather = {"code": "HA201", "name": "n", "message": "AllGather_model", "severity": "warning",
              "location": {"file": "layers.py", "line": 4, "computation": None, "instruction": "all-gather.1",
                           "hlo_line": None, "context": None},
              "notation": "AllGather_model: [I, J_model] -> [I, J]", "seconds": None, "alternative": None,
              "alternative_seconds": None, "saving_seconds": None, "fix": None, "details": {"$dict": []}}
    previous = {"diagnostics": [], "sources": {"train.py": old_sha},
                "plan": {"arguments": {"params['w_out']": "P('model', None)"}, "mesh": {"data": 4, "model": 2}}}
    record = {"diagnostics": [gather], "sources": {"train.py": new_sha},
              "plan": {"arguments": {"params['w_out']": "P(None, 'model')"}, "mesh": {"data": 4, "model": 2}}}
    said = check.explain_changes(record, previous, root=tmp_path, source=store.source)
    (text,) = said.values()
    assert "params['w_out']: P('model', None) -> P(None, 'model')" in text
    assert "train.py:2:" in text and 'P(None, "model")}' in text


