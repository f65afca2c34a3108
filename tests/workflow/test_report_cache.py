"""`hlo-analyzer report` answered from the result cache (issue 29): the same analysis asked again replays the
written report byte for byte in each format (HTML, Markdown, JSON), prints the same line and exits the same,
without importing jax; a changed config or entry point's module recomputes and reverting it hits again;
--no-cache computes. Each run is its own process, as a user's is.
"""

from __future__ import annotations

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
from test_cache_real import PROBE, child_env, imported  # noqa: E402  (the probe that runs the CLI, names heavy imports)


def report(root: Path, *argv: str) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, "report", "plan.toml", *argv], cwd=root, env=child_env(),
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, imported(proc.stderr)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "plan.toml").write_text(CONFIG)
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


def test_a_repeated_report_is_replayed_byte_for_byte_in_every_format_without_jax(project):
    for name in ("r.md", "r.json", "r.html"):
        cold = report(project, "-o", name)
        assert cold[0] == 0 and "jax" in cold[2], cold
        first = (project / name).read_bytes()
        (project / name).unlink()
        warm = report(project, "-o", name)
        assert warm[:2] == cold[:2] and warm[2] == ""  # no jax, jaxlib, numpy, pandas or lark on a hit
        assert (project / name).read_bytes() == first
    assert (project / ".hlo-analyzer-cache" / "CACHEDIR.TAG").is_file()


def test_a_change_recomputes_reverting_hits_and_no_cache_computes(project):
    cold = report(project, "-o", "r.md")
    first = (project / "r.md").read_bytes()
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
