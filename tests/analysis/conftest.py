"""Shared set-up of the analysis tests: each program is compiled and analysed once per session.

The chapter's programs come from `examples/chapter.py` (the repository root is put on sys.path for it).
`analysis(name, mesh_key, target)` analyses one entry point on one of the meshes below and caches the report,
so the test modules can look at the same analysis from several angles without recompiling.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def libtpu_reason() -> str | None:
    """Why TPU tests cannot run here, or None when libtpu is installed and knows the v5e:2x4 topology."""
    if importlib.util.find_spec("libtpu") is None:
        return "libtpu is not installed (pip install 'jax[tpu]==<your jax>')"
    try:
        from jax.experimental import topologies

        # as analyzer.compile.lower does: compile-only use drives no chip, so another process holding
        # /tmp/libtpu_lockfile (a second test run, an analysis) must not make these tests skip
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x4")
    except Exception as e:  # noqa: BLE001 - any failure means no TPU AOT compiles here
        return f"libtpu cannot describe a v5e:2x4 topology: {e}"
    return None


def _mesh(key: str):
    """The meshes of the acceptance tests, by key."""
    import jax
    import numpy as np

    from analyzer.compile.lower import make_mesh

    if key == "xy":
        return make_mesh({"X": 4, "Y": 2})
    if key == "xyz":
        return make_mesh({"X": 2, "Y": 2, "Z": 2})
    if key == "one":
        return make_mesh({"X": 1})
    if key == "named":
        return make_mesh({"data": 4, "model": 2})
    if key == "permuted":
        # The same X=4, Y=2 mesh with the devices in another order: partition i is still mesh position i.
        devices = np.array(jax.devices()[:8])[[5, 2, 7, 0, 3, 6, 1, 4]].reshape(4, 2)
        return jax.sharding.Mesh(devices, ("X", "Y"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    raise KeyError(key)


@pytest.fixture(scope="session")
def analysis():
    """`analysis(name, mesh_key="xy", target="cpu")` -> Report, cached for the session."""
    import analyzer
    from examples import chapter

    cache: dict[tuple[str, str, str], object] = {}

    def get(name: str, mesh_key: str = "xy", target: str = "cpu"):
        key = (name, mesh_key, target)
        if key not in cache:
            mesh = _mesh(mesh_key)
            fn, args = getattr(chapter, name)(mesh)
            cache[key] = analyzer.analyze(fn, *args, mesh=mesh, target=target)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def tpu_reason() -> str | None:
    """None when TPU ahead-of-time compiles work here, else why not (tests skip with it)."""
    return libtpu_reason()
