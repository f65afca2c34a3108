"""Test session set-up shared by every test folder.

jax reads XLA_FLAGS and JAX_PLATFORMS once, when it first initialises, so they are set here, before any
test imports it: 8 fake CPU devices let the small meshes of the tests compile in this process (larger ones
go through the analyzer's subprocess path), and JAX_PLATFORMS=cpu keeps an installed libtpu from probing
for TPU chips that this machine does not have.
"""

import os

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def planned():
    """`planned("replicated_batch")` -> the Report of that plan of tests/rules/plans.py (one small MLP step,
    several plans), analysed once per session for the analysis and the rule tests."""
    import importlib.util
    from pathlib import Path

    import analyzer

    spec = importlib.util.spec_from_file_location("_plans", Path(__file__).parent / "rules" / "plans.py")
    plans = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plans)
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            fn, args, kwargs = plans.plan(name)
            cache[name] = analyzer.analyze(fn, *args, **kwargs)
        return cache[name]

    get.plans = plans
    return get
