"""Print the third-party suite's figures (tests/thirdparty, issue 26 item 9): for each program and plan, the model
FLOPs, the predicted step, and each finding with the saving it promised beside the saving its change delivered when
applied and recompiled (`--verify-fixes`).

    python3 scripts/thirdparty_suite.py [PROGRAM[:PLAN] ...]     # default: every program, every plan

8 fake CPU devices (mesh data=4, model=2; the MoE data=4, expert=2), priced on TPU v5p. The Hugging Face models need
transformers<5 (the test extra on Python < 3.12); they are left out, with the reason, where it is missing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _programs():
    spec = importlib.util.spec_from_file_location("_thirdparty_programs", ROOT / "tests" / "thirdparty" / "programs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def main(names: list[str]) -> int:
    flag = "--xla_force_host_platform_device_count"
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}=8".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    from analyzer.units import format_seconds

    programs = _programs()
    missing = programs.hf_missing()
    wanted = [tuple((n.split(":") + [""])[:2]) for n in names] or [(p, "") for p in programs.PROGRAMS]
    print("| model | plan | model FLOPs | step | finding | promised | verified | ratio | change |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|")
    for name, only in wanted:
        if name in programs.HF_MODELS and missing:
            print(f"| {name} | — | | | skipped: {missing} | | | | |")
            continue
        for plan in [only] if only else programs.PLANS:
            report = programs.analysed(name, plan)
            head = f"| {name} | {plan} | {report.totals.model_flops:.4g} | {format_seconds(report.totals.step_seconds)}"
            rows = [d for d in report.diagnostics if d.severity.value != "info"] or [None]
            for d in rows:
                if d is None:
                    print(f"{head} | (no finding) | | | | |")
                    continue
                promised = float(d.saving_seconds or 0.0)
                saved = d.details.get("verified_saving_seconds")
                ratio = f"{saved / promised:.2f}" if saved is not None and promised > 0 else ""
                change = d.details.get("verified_change") or "not verified: " + str(d.details.get("unverified_reason", ""))
                print(f"{head} | {d.code} {d.severity.value} | {format_seconds(promised)} | "
                      f"{format_seconds(saved) if saved is not None else '—'} | {ratio} | {change[:90]} |")
                head = "| | | |"
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
