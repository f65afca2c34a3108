"""diff's config sides answered from the result cache (issue 29): the working-tree side keyed as check's entries
are, a `REV:path` side keyed on the revision's files (not on the commit, not on the temporary export's folder),
with the record of what the analysis imported coming from the child that analysed it. The fast tests replace the
analysis (in this process, and the child of a revision) by a counting stand-in; the slow one runs the command
twice on real compiles, in fresh processes, and checks the second is the same bytes without importing jax.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer.workflows import diff as diffmod

PYPROJECT = ('[project]\nname = "toy"\nversion = "0"\n\n[tool.hlo-analyzer]\n'
             'entry-points = ["toy.train:train_step"]\nmesh = { data = 4, model = 2 }\nhardware = "tpu-v5e"\n')
TRAIN = 'from toy.layers import mlp\n\n\ndef train_step(mesh):\n    return mlp, ()\n'
LAYERS = "def mlp(x):\n    return x\n"
NO_DEPS = {"project": {}, "files": [], "dists": {}}


def _program(root: str, text: str) -> dict:
    row = {"kind": "all-gather", "axes": ["model"], "notation": "AllGather_model: [I_model] -> [I]",
           "dtype": "bf16", "bytes": 1024, "count": 1, "seconds": 1e-6, "total_seconds": 1e-6,
           "op_name": "jit(step)/dot_general", "source": f"{root}/toy/layers.py:2", "extra": "dropped"}
    return {"collectives": [row], "plan": {"form": "spec", "arguments": {"x": "P('data')"},
                                           "mesh": {"data": 4, "model": 2}, "config": {}},
            "sources": {f"{root}/toy/layers.py": text}}


sys.path.insert(0, str(Path(__file__).parent))
from test_cache_real import write_toy  # noqa: E402


@pytest.fixture
def toy(tmp_path: Path, monkeypatch) -> Path:
    root = write_toy(tmp_path / "toy-project", layers=LAYERS, train=TRAIN, pyproject=PYPROJECT)
    monkeypatch.delenv("HLO_ANALYZER_NO_CACHE", raising=False)
    monkeypatch.delenv("HLO_ANALYZER_CACHE_DIR", raising=False)
    return root


class _Calls(list):
    child: object


@pytest.fixture
def analysed(monkeypatch) -> _Calls:
    """Each analysis run, in this process (("here", path)) or in a revision's child (("child", job)); the
    stand-in returns one program whose source text is the layers file as that tree holds it."""
    calls = _Calls()

    def here(path, *, hardware=None):
        calls.append(("here", path))
        root = str(Path(path).parent.resolve())
        return {"toy.train:train_step": _program(root, (Path(path).parent / "toy" / "layers.py").read_text())}

    def child(config, options, timeout, label=None):
        calls.append(("child", dict(options)))
        tree = Path(config).parent
        programs = {"toy.train:train_step": _program(str(tree), (tree / "toy" / "layers.py").read_text())}
        programs = {n: diffmod._relative_sources(d, *options["roots"]) for n, d in programs.items()}
        deps = child.deps(tree) if options.get("record") else None
        return {"programs": programs, "deps": deps}

    child.deps = lambda tree: NO_DEPS
    monkeypatch.setattr(diffmod, "analyse_config", here)
    monkeypatch.setattr(diffmod, "_analyse_config_in_child", child)
    calls.child = child
    return calls


def _same(a: diffmod.Side, b: diffmod.Side) -> bool:
    return dict(a) == dict(b) and a.plans == b.plans


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(root), *args], check=True,
                   capture_output=True)


def test_a_working_tree_side_is_read_back_until_what_it_depends_on_changes(toy, analysed):
    first = diffmod.load_side("pyproject.toml", cwd=toy)
    assert len(analysed) == 1 and (toy / ".hlo-analyzer-cache" / "CACHEDIR.TAG").is_file()
    assert "extra" not in first["toy.train:train_step"][0]  # only what a diff reads is kept
    again = diffmod.load_side("pyproject.toml", cwd=toy)
    assert len(analysed) == 1 and _same(again, first)
    assert again.plans["toy.train:train_step"]["sources"] == {"toy/layers.py": LAYERS}
    (toy / "NOTES.md").write_text("no entry point reads this\n")
    diffmod.load_side("pyproject.toml", cwd=toy)
    assert len(analysed) == 1
    (toy / "toy" / "layers.py").write_text(LAYERS + "# changed\n")  # an imported module
    changed = diffmod.load_side("pyproject.toml", cwd=toy)
    assert len(analysed) == 2 and not _same(changed, first)
    (toy / "toy" / "layers.py").write_text(LAYERS)  # reverted: the first result again, from the cache
    assert _same(diffmod.load_side("pyproject.toml", cwd=toy), first) and len(analysed) == 2
    diffmod.load_side("pyproject.toml", cwd=toy, hardware="tpu-v5p")  # another option: another key
    assert len(analysed) == 3
    diffmod.load_side("pyproject.toml", cwd=toy, no_cache=True)
    assert len(analysed) == 4
    (toy / "pyproject.toml").write_text(PYPROJECT.replace("model = 2", "model = 2, extra = 1"))  # the config
    diffmod.load_side("pyproject.toml", cwd=toy)
    assert len(analysed) == 5


def test_a_revision_is_keyed_on_its_files_not_on_the_commit_or_the_export(toy, analysed):
    _git(toy, "init", "-q")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "toy")
    first = diffmod.load_side("HEAD:pyproject.toml", cwd=toy)
    assert len(analysed) == 1
    job = analysed[0][1]
    assert job["record"] and Path(job["record"]).resolve() == Path(job["roots"][0]).resolve()  # the export
    # Another export, another temporary folder: the same key.
    assert _same(diffmod.load_side("HEAD:pyproject.toml", cwd=toy), first) and len(analysed) == 1
    assert first.plans["toy.train:train_step"]["sources"] == {"toy/layers.py": LAYERS}
    (toy / "NOTES.md").write_text("no entry point reads this\n")  # a new commit that leaves the entry's files
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "notes")
    assert _same(diffmod.load_side("HEAD:pyproject.toml", cwd=toy), first) and len(analysed) == 1
    (toy / "toy" / "layers.py").write_text(LAYERS + "# changed\n")
    _git(toy, "commit", "-qam", "layers")
    changed = diffmod.load_side("HEAD:pyproject.toml", cwd=toy)
    assert len(analysed) == 2 and not _same(changed, first)
    assert _same(diffmod.load_side("HEAD~1:pyproject.toml", cwd=toy), first) and len(analysed) == 2
    diffmod.load_side("HEAD~1:pyproject.toml", cwd=toy, no_cache=True)
    assert len(analysed) == 3


def test_a_revision_hit_checks_the_childs_record_against_the_new_export(toy, analysed):
    """A module the entry point imports without an import statement (importlib) is not in the key; the child
    records it (relative to the export, by content), and a revision where it differs is a miss."""
    (toy / "toy" / "plugin.py").write_text("SIZE = 1\n")
    _git(toy, "init", "-q")
    _git(toy, "add", "-A")
    _git(toy, "commit", "-qm", "toy")

    def deps(tree: Path) -> dict:
        digest = hashlib.sha256((tree / "toy" / "plugin.py").read_bytes()).hexdigest()
        return {"project": {"toy/plugin.py": digest}, "files": [], "dists": {}}

    analysed.child.deps = deps
    diffmod.load_side("HEAD:pyproject.toml", cwd=toy)
    diffmod.load_side("HEAD:pyproject.toml", cwd=toy)
    assert len(analysed) == 1
    (toy / "toy" / "plugin.py").write_text("SIZE = 2\n")
    _git(toy, "commit", "-qam", "plugin")
    diffmod.load_side("HEAD:pyproject.toml", cwd=toy)
    assert len(analysed) == 2
    diffmod.load_side("HEAD~1:pyproject.toml", cwd=toy)
    assert len(analysed) == 2  # the first revision's entry still holds


def test_a_damaged_entry_or_a_lost_source_text_is_a_miss_and_an_unwritable_cache_is_said(toy, analysed):
    first = diffmod.load_side("pyproject.toml", cwd=toy)
    cache = toy / ".hlo-analyzer-cache"
    (entry,) = (cache / "v1" / "entries").rglob("*.json")
    entry.write_text(entry.read_text()[:-20])
    assert _same(diffmod.load_side("pyproject.toml", cwd=toy), first) and len(analysed) == 2
    for blob in (cache / "v1" / "sources").iterdir():
        blob.unlink()
    assert _same(diffmod.load_side("pyproject.toml", cwd=toy), first) and len(analysed) == 3
    import shutil

    shutil.rmtree(cache)
    cache.write_text("a file where the cache folder would be: nothing can be written there, even by root\n")
    side = diffmod.load_side("pyproject.toml", cwd=toy)
    assert _same(side, first) and side.cache_note and "not cached" in side.cache_note


@pytest.mark.slow
def test_diff_of_a_revision_and_the_working_tree_again_is_the_same_bytes_without_jax(tmp_path):
    from test_cache_real import PROBE, TRAIN as REAL_TRAIN, child_env, imported

    root = write_toy(tmp_path / "toy-project", commit=True)
    (root / "toy" / "train.py").write_text(REAL_TRAIN.replace('"w_out": sds((F, D), P("model", None))',
                                                              '"w_out": sds((F, D), P(None, "model"))'))
    env = child_env()

    def diff(*extra: str) -> tuple[int, str, str]:
        proc = subprocess.run([sys.executable, "-c", PROBE, "diff", "HEAD:pyproject.toml", "pyproject.toml",
                               *extra], cwd=root, env=env, capture_output=True, text=True, timeout=600)
        return proc.returncode, proc.stdout, proc.stderr

    cold = diff("--json")
    assert cold[0] == 0 and "jax" in imported(cold[2]), cold[2]
    assert any(c.get("why") for p in json.loads(cold[1])["programs"] for c in p["changes"])
    warm = diff("--json")
    assert warm[:2] == cold[:2] and imported(warm[2]) == ""
    # The text of the same two sides (both hits) says what changed in the plan for each added collective: the
    # argument with its old and new spec and the changed line (diff's explanation, tests/workflow/
    # test_diff_explain.py, on these real compiles; that file's slow test compiled this same diff again).
    code, out, err = diff()
    assert code == 0 and imported(err) == "", err
    line = next(i for i, text in enumerate((root / "toy" / "train.py").read_text().splitlines(), 1)
                if '"w_out"' in text)
    said = [s for s in out.splitlines() if "changed in the plan:" in s]
    added = [s for s in out.splitlines() if s.startswith("  + ")]
    assert added and len(said) == len(added), out
    assert all("params['w_out']: P('model', None) -> P(None, 'model')" in s for s in said)
    assert all(f"toy/train.py:{line}:" in s for s in said)
    assert "toy/layers.py:" in out  # the collective's own line stays
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "spec")  # the same two trees, now HEAD~1 and HEAD: both sides hit
    moved = subprocess.run([sys.executable, "-c", PROBE, "diff", "HEAD~1:pyproject.toml", "HEAD:pyproject.toml",
                            "--json"], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert imported(moved.stderr) == ""
    assert json.loads(moved.stdout)["programs"] == json.loads(cold[1])["programs"]
