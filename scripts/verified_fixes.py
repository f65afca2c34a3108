"""Print, for the bad plans of tests/rules/plans.py, each finding's promised saving beside the saving its change
delivered when `--verify-fixes` applied it and recompiled (analyzer.workflows.verify; issue 26's acceptance: an
error finding's fix saves at least half of what it promised).

    python3 scripts/verified_fixes.py [PLAN ...]     # default: replicated_batch wrong_dim embedding

Plans: the names of `plans.PLANS`, `embedding` (`plans.embedding_plan()`, the table's features over 'data'),
`moe` (`plans.moe_plan()`) and `scanned` (`plans.scanned_plan()`, the batch replicated in a scanned MLP).
Each plan is compiled once, then once per distinct change its findings propose (8 fake CPU devices, priced on
TPU v5p). Columns: rule, promised saving per step, saving verified (step before - step after), their ratio,
the change applied (or why none was), and for a smaller root cause the saving of its change made after the
largest root cause's. The last line counts the findings whose change was verified and those that saved less
than half of their promise (issue 26's acceptance: none); exit status 1 when any did.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _plans():
    spec = importlib.util.spec_from_file_location("_plans", ROOT / "tests" / "rules" / "plans.py")
    plans = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plans)
    return plans


def main(names: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import analyzer
    from analyzer.units import format_seconds
    from analyzer.workflows.verify import verify_fixes

    plans = _plans()
    special = {"embedding": plans.embedding_plan, "moe": plans.moe_plan, "scanned": plans.scanned_plan}
    checked, short = 0, []
    for name in names or ["replicated_batch", "wrong_dim", "embedding"]:
        fn, args, kwargs = special[name]() if name in special else plans.plan(name)
        report = verify_fixes(analyzer.analyze(fn, *args, **kwargs), fn, args, mesh=kwargs["mesh"])
        print(f"{name}: predicted step {format_seconds(report.totals.step_seconds)}")
        for d in report.diagnostics:
            promised = float(d.saving_seconds or 0.0)
            saved = d.details.get("verified_saving_seconds")
            ratio = f"{saved / promised:5.2f}x" if saved is not None and promised > 0 else "   — "
            what = d.details.get("verified_change") or f"not verified: {d.details.get('unverified_reason', '')}"
            after = d.details.get("verified_after_saving_seconds")
            then = f"  (after the top fix too: {format_seconds(after)})" if after is not None else ""
            print(f"  {d.code}  promised {format_seconds(promised):>9}  verified "
                  f"{format_seconds(saved) if saved is not None else '—':>9}  {ratio}  {what[:110]}{then}")
            if saved is not None and promised > 0:
                checked += 1
                if saved < 0.5 * promised:
                    short.append(f"{name} {d.code}")
    print(f"{checked} findings' changes verified; {len(short)} saved less than half their promise"
          + (f": {', '.join(short)}" if short else ""))
    return 1 if short else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
