"""`hlo-analyzer rules` lists the plan checks; `hlo-analyzer rule CODE` prints one rule's documentation."""

from __future__ import annotations

import argparse
import json
import sys

RULES_EPILOG = """\
examples:
  hlo-analyzer rules
  hlo-analyzer rules --json
  hlo-analyzer rule HA102
  hlo-analyzer rule gathered-larger-operand

Select and ignore rules by code or prefix in [tool.hlo-analyzer] of pyproject.toml:
  [tool.hlo-analyzer]
  ignore = ["HA202"]
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("rules", help="list the plan checks (code, name, severity, summary)",
                              description="Every plan check: its stable code, kebab-case name, default severity "
                                          "and what it finds.", epilog=RULES_EPILOG)
    p.add_argument("codes", metavar="CODE", nargs="*",
                   help="only these rules: a code (HA101), a prefix (HA2) or a name (comm-bound-matmul)")
    p.add_argument("--json", action="store_true", help="print a JSON list with each rule's options and doc")
    p.add_argument("--markdown", action="store_true",
                   help="print the reference page docs/rules.md (every rule's doc and the config keys)")
    p.set_defaults(func=run_rules_list)
    q = subparsers.add_parser("rule", help="print one rule's documentation",
                              description="Print a rule's documentation: What it does / Why is this bad? / "
                                          "Example / Use instead / References, and its options.",
                              epilog="examples:\n  hlo-analyzer rule HA101\n  hlo-analyzer rule comm-bound-matmul")
    q.add_argument("code", metavar="CODE", help="a rule code (HA101) or name (comm-bound-matmul)")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=run_rule_doc)


def _as_dict(rule) -> dict:
    return {"code": rule.code, "name": rule.name, "severity": rule.severity.value, "summary": rule.summary,
            "options": [{"name": o.toml_name, "default": o.default, "doc": o.doc} for o in rule.options],
            "doc": rule.doc}


def run_rules_list(args: argparse.Namespace) -> int:
    from analyzer.rules import all_rules

    rules = all_rules()
    wanted = getattr(args, "codes", None) or []
    if wanted:
        picked = [r for r in rules if any(r.code.startswith(w.upper()) or r.name == w for w in wanted)]
        for w in wanted:
            if not any(r.code.startswith(w.upper()) or r.name == w for r in rules):
                return _unknown_rule(w)
        rules = picked
    if getattr(args, "markdown", False):
        sys.stdout.write(markdown())
        return 0
    if args.json:
        print(json.dumps([_as_dict(r) for r in rules], indent=2))
        return 0
    width = max(len(r.name) for r in rules)
    print(f"{'code':<6} {'name':<{width}} {'severity':<8} summary")
    for r in rules:
        print(f"{r.code:<6} {r.name:<{width}} {r.severity.value:<8} {r.summary}")
    return 0


def _unknown_rule(token: str) -> int:
    """Say that `token` names no rule (with the registry's suggestion and the valid codes); exit status 2."""
    from analyzer.errors import ConfigError
    from analyzer.rules import get_rule

    try:
        get_rule(token)
    except ConfigError as e:
        print(f"hlo-analyzer: {e.message}", file=sys.stderr)
    return 2


def options_text(rule) -> str:
    """The rule's options as a Markdown section (empty when it has none)."""
    if not rule.options:
        return ""
    lines = ["## Options", "", f"Under `[tool.hlo-analyzer.rules.{rule.code}]` (any rule also takes `severity`):", ""]
    for o in rule.options:
        default = json.dumps(o.default)
        lines.append(f"- `{o.toml_name}` (default `{default}`): {o.doc}")
    return "\n".join(lines)


def run_rule_doc(args: argparse.Namespace) -> int:
    from analyzer.errors import ConfigError
    from analyzer.rules import get_rule

    try:
        rule = get_rule(args.code)
    except ConfigError as e:
        print(f"hlo-analyzer: {e.message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_as_dict(rule), indent=2))
        return 0
    print(f"# {rule.code} {rule.name} ({rule.severity.value})\n")
    print(rule.doc)
    extra = options_text(rule)
    if extra:
        print("\n" + extra)
    return 0


CONFIG_KEYS = (
    ("select", "list of codes, prefixes or names", "rules to run (default: every rule, `[\"HA\"]`)"),
    ("ignore", "list of codes, prefixes or names", "rules not to run; the longer of a matching select/ignore wins"),
    ("hardware", "string", "hardware spec name or path (`hlo-analyzer hardware list`)"),
    ("topology", "string", "physical slice, e.g. `v5e:4x2`"),
    ("mesh", "table", "mesh axis name = size, major to minor"),
    ("target", "string", "`cpu` or `tpu:<gen>:<shape>[*N]`"),
    ("entry-points", "list of strings", "`module:function` returning (jitted fn, abstract args), or "
     "`maxtext:KEY=VALUE ...` (MaxText's own step), for `check`"),
    ("baseline", "string", "baseline file (relative to the pyproject.toml): accepted findings"),
    ("min-saving-seconds", "number", "findings that save less per step are negligible and dropped (default 10e-6)"),
    ("min-saving-fraction", "number",
     "... and so are those under this fraction of the predicted step (of its communication when the report has "
     "no step; default 0.01)"),
    ("baseline-tolerance", "number",
     "a baselined finding whose cost grew more than this fraction is new again (default 0.10)"),
    ("timeout", "number", "seconds each entry point (import, call, compile) may take in `check`; also bounds "
     "`@audit`'s compile"),
    ("xla-flags", "string or list of strings", "the run's XLA flags (`--xla_<name>=<value>`): `check` compiles with "
     "them and the step model reads them (docs/step.md, \"The user's XLA flags\"); `check --xla-flags` replaces them"),
    ("budgets.comm-seconds-per-step", "number", "HA501: predicted communication seconds per step"),
    ("budgets.comm-compute-ratio", "number", "HA502: predicted communication / compute per step"),
    ("rules.CODE.OPTION", "per rule", "a rule's thresholds (below), and `severity` for any rule"),
)


# How the runner treats every rule's findings alike (analyzer/rules/runner.py); the defaults' reasons.
HYGIENE = [
    "## Savings in step time", "",
    "A finding's `saving_seconds` is what its change removes from the predicted step (`Totals.step_seconds`,",
    "docs/step.md), not from the sum of collectives. The step is the compute stream's end: a collective",
    "hidden behind compute costs no step time, so making it cheaper saves nothing; an exposed one (the compute",
    "waits for it: the row's `exposed_seconds`) saves at most its exposed time. For a change that replaces",
    "the collectives C (each `t_c` seconds per call, `n_c` calls per step, `e_c` exposed per step) by",
    "alternatives costing `t'_c`:", "",
    "```",
    "comm saving  = sum over C of (t_c - t'_c) x n_c         (what leaves the links)",
    "e_C          = sum over C made cheaper of min(e_c, t_c x n_c)",
    "step saving  = max(0, min(e_C, comm saving))           (saving_seconds)",
    "```", "",
    "The waits shrink one for one with the link time until nothing is exposed: the step model's first-order",
    "answer (a cheaper collective can also let a queued one start sooner: one on the same link, or on the cpu",
    "target any collective, since its overlap model runs them one at a time; that second-order gain is not",
    "claimed). `seconds` and `alternative_seconds` stay the communication before and after the change; each",
    "message ends with a sentence rendered from the same three figures (`details.exposed_seconds`,",
    "`details.comm_saving_seconds` in JSON), e.g. \"In the predicted step the compute waits 557 µs per step for",
    "this communication, so the change saves all 123 µs per step it takes off the links.\" A change whose",
    "collectives are all hidden saves nothing and is dropped as negligible; HA101 weighs only dots whose",
    "collectives the step waits for. A root cause's summed saving is capped at the step's exposed",
    "communication. Without a predicted step (a report rebuilt from an old JSON file) savings are the",
    "communication saving.", "",
    "## Duplicate findings", "",
    "Findings of one rule at one user line about one collective (the same baseline fingerprint: code, file,",
    "collective in notation, HLO opcode) are one finding: a layer's forward and backward loops, or two scans",
    "over the same code, would otherwise print it twice. The kept finding is the costliest; its times and",
    "saving are the sums and its message says how many it stands for (`details.merged` in JSON).", "",
    "## Root causes", "",
    "One sharding decision shows up as many findings (a layout that reshards every layer's activations, a",
    "weight sharded the wrong way in every layer), so findings are grouped by the decision behind them: one",
    "argument's spec (layers folded: `params['layers_*']['w_in']['kernel']`), one with_sharding_constraint",
    "(HA304 at its line and the findings of the collectives it forces, which take its change and, for a reshard,",
    "its line), one activation layout (HA302,",
    "HA303 over a mesh axis), one mesh axis's placement (HA201-HA204), else one rule at one line. A group's",
    "saving is its members' summed, each collective once (at most the step's exposed communication); findings",
    "are listed by it, largest first, and the report opens with the group to fix first (`details.root_cause`,",
    "`details.root_cause_saving` in JSON).", "",
    "## Fixes that must fit in HBM", "",
    "A fix that reshapes the plan (HA101's roofline fixes: a new mesh, a larger batch) carries the per-device",
    "bytes of the plan it leads to (`details.fix_memory_bytes`, `details.fix_fits`): XLA's figures for the plan",
    "as it is (what HA401 adds), with the arguments re-sharded on the new mesh sizes from their",
    "PartitionSpecs, the outputs scaled as the arguments, and the temporaries scaled with the tokens each chip",
    "holds (the mesh axes of the integer arguments' leading dim: token ids, labels; times any larger batch) and",
    "grown with every other mesh axis that shrinks: an upper bound (7.46 GB estimated, 6.64 GB compiled on",
    "transformers' Flax Llama with `model` 2 -> 1, `data` 4 -> 8).",
    "A fix whose plan needs more than now and more than HBM (times HA401's `fraction`) is no saving: its",
    "`saving_seconds` is null, what it would save is in `details.unfit_saving_seconds`, and its message says",
    "why, so the report opens with the largest fix that fits. Other fixes (wraparound, a reordered mesh, a",
    "matched layout, combined collectives) hold no more per device than the plan does and are not judged; a",
    "plan already over HBM is HA401's finding; a report without its abstract arguments (an HLO dump) gets no",
    "estimate (see analyzer/rules/fit.py).", "",
    "## Negligible findings", "",
    "A finding of a rule that predicts a saving is dropped when the saving per step of its root cause is under",
    "the larger of `min-saving-seconds` (default 10 µs) and `min-saving-fraction` (default 1%) of the",
    "predicted step (`Totals.step_seconds`): eleven 0.5% instances of one layout stand together as 5.5%. The",
    "fraction is of the time the savings are in (\"Savings in step time\"): a report without a predicted step",
    "(an HLO dump without one, a report rebuilt from JSON without one) has communication savings, and the",
    "fraction is then of the step's predicted communication. The report's notes say how many were dropped, by",
    "rule, and of which base (\"... of 63.6 ms predicted step\" or \"... of 18.9 ms of communication\"). A",
    "rule's own `min-saving-seconds` option, when set, replaces both for that rule; set both keys to 0 to see",
    "everything. Budgets (HA5xx), memory (HA4xx) and the meta rules are exempt: a limit is not a saving to",
    "weigh. A fix that does not fit in HBM is weighed by what it would save: a negligible one is dropped, a",
    "large one kept to say why not.", "",
    "Why these defaults: ICI costs about `T_min` = 1 µs per hop (\"How to Scale Your Model\", sharding",
    "chapter, \"A note on ICI latency\"; Problem 3's latency-bound AllGather takes about 2 µs), so 10 µs is",
    "the latency floor of one or two small collectives: the resolution of the cost model, and far below the",
    "noise between steps. A change that saves under 1% of the step is not worth a sharding change on its own;",
    "on a 20 ms step that is 200 µs, about what one 16 MiB AllGather costs on a v5e ring.",
    "",
]


def markdown() -> str:
    """The rule reference page (docs/rules.md), generated from the rules' own docs."""
    from analyzer.rules import all_rules

    rules = all_rules()
    out = ["<!-- Generated by `hlo-analyzer rules --markdown > docs/rules.md`; tests/rules fails when stale. -->",
           "# Plan-check rules", "",
           "Each finding names the collective in the chapter's notation, its predicted time, the cheaper",
           "alternative with its time, the saving per step, and the change to make.", "",
           "| Code | Name | Severity | Summary |", "|---|---|---|---|"]
    out += [f"| [{r.code}](#{r.code.lower()}-{r.name}) | `{r.name}` | {r.severity.value} | {r.summary} |"
            for r in rules]
    out += ["", "## Configuration", "", "In `[tool.hlo-analyzer]` of `pyproject.toml`:", "",
            "| Key | Type | Meaning |", "|---|---|---|"]
    out += [f"| `{k}` | {t} | {m} |" for k, t, m in CONFIG_KEYS]
    out += ["", "`mesh` and `topology` are checked together before anything compiles (as many devices as the slice",
            "has chips); a bad key or value is reported at its `file:line`. From Python, `analyze(..., config=...)`,",
            "`analyze_hlo(..., config=...)` and `@audit(config=...)` take the same keys as a dict",
            "(`config={\"ignore\": [\"HA202\"], \"min-saving-seconds\": 0}`), checked the same way, or a `Config`, or a",
            "path to a pyproject.toml.",
            "", "Inline: `# hlo-analyzer: ignore[HA101]` on the source line a finding points at.",
            "Baseline: `hlo-analyzer check --write-baseline`, then `baseline = \"...\"`.", ""]
    out += HYGIENE
    for r in rules:
        body = r.doc.replace("\n## ", "\n### ")
        if body.startswith("## "):
            body = "#" + body
        out += [f"## {r.code} {r.name}", "", f"Default severity: **{r.severity.value}**.", "", body, ""]
        opts = options_text(r)
        if opts:
            out += [opts.replace("## Options", "### Options"), ""]
    return "\n".join(out).rstrip() + "\n"
