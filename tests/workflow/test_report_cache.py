"""`hlo-analyzer report` answered from the result cache (issue 29): the same analysis asked again replays the
written report byte for byte in each format (HTML, Markdown, JSON), prints the same line and exits the same,
without importing jax; a changed config or entry point's module recomputes and reverting it hits again;
--no-cache computes. Each run is its own process, as a user's is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real compiles in child processes

CONFIG = """\
name = "tiny"
entry = "model.py:step"
hardware = "tpu-v5e"
[mesh]
data = 4
model = 2
"""

MODEL = """\
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def step(mesh):
    def sds(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    w = sds((256, 512), P(None, "model"))
    x = sds((64, 256), P("data", None))
    return jax.jit(lambda w, x: jnp.tanh(x @ w).sum()), (w, x)
"""

sys.path.insert(0, str(Path(__file__).parent))
from test_cache_real import PROBE, child_env, imported, restore  # noqa: E402  (the CLI probe; a cold run's tree back)


def report(root: Path, *argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, "report", "plan.toml", *argv], cwd=root, env=child_env(),
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, imported(proc.stderr)


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> tuple[Path, Path, tuple[int, str, str], bytes]:
    """The project's Markdown report made once, cold: (the project, a copy of it with the cache that run wrote,
    the run's result, the report's bytes). Both tests start from it; making it again for each would be the same
    cold run twice."""
    base = tmp_path_factory.mktemp("reported")
    root = base / "project"
    root.mkdir()
    (root / "plan.toml").write_text(CONFIG)
    (root / "model.py").write_text(MODEL)
    cold = report(root, "-o", "r.md")
    first = (root / "r.md").read_bytes()
    shutil.copytree(root, base / "as-reported", symlinks=True)
    return root, base / "as-reported", cold, first


@pytest.fixture
def project(reported) -> Path:
    """The project as its cold Markdown run left it (report and cache), back at the folder it ran in (a cache entry
    is the project's, at its path)."""
    root, saved, _, _ = reported
    return restore(saved, root)


def test_a_repeated_report_is_replayed_byte_for_byte_in_every_format_without_jax(project, reported):
    for name in ("r.md", "r.json", "r.html"):
        if name == "r.md":  # the module's cold run
            cold, first = reported[2], reported[3]
        else:
            cold = report(project, "-o", name)
            first = (project / name).read_bytes()
        assert cold[0] == 0 and "jax" in cold[2], cold
        (project / name).unlink()
        warm = report(project, "-o", name)
        assert warm[:2] == cold[:2] and warm[2] == ""  # no jax, jaxlib, numpy, pandas or lark on a hit
        assert (project / name).read_bytes() == first
    assert (project / ".hlo-analyzer-cache" / "CACHEDIR.TAG").is_file()


def test_a_change_recomputes_reverting_hits_and_no_cache_computes(project, reported):
    # The unchanged project's report: the module's cold run (the replay of a cold run is its bytes, without jax:
    # the test above).
    cold, first = reported[2], reported[3]
    model = project / "model.py"
    model.write_text(MODEL.replace('P(None, "model")', 'P("model", None)'))
    changed = report(project, "-o", "r.md")
    assert "jax" in changed[2] and (project / "r.md").read_bytes() != first
    model.write_text(MODEL)
    reverted = report(project, "-o", "r.md")
    assert reverted[:2] == cold[:2] and reverted[2] == "" and (project / "r.md").read_bytes() == first
    (project / "plan.toml").write_text(CONFIG.replace("data = 4\nmodel = 2", "data = 2\nmodel = 4"))
    assert "jax" in report(project, "-o", "r.md")[2]
    (project / "plan.toml").write_text(CONFIG)
    assert report(project, "-o", "r.md")[2] == ""
    assert "jax" in report(project, "-o", "r.md", "--no-cache")[2]
    assert "jax" in report(project, "-o", "r.md", "--hardware", "tpu-v5p")[2]  # an option of the key
