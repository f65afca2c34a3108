"""`hlo-analyzer check [PATHS]`: the pre-commit hook and CI gate (logic in analyzer/workflows/check.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyzer.errors import ConfigError

OUTPUT_FORMATS = ("text", "json", "github", "sarif")
DEFAULT_BASELINE = ".hlo-analyzer-baseline.json"

DESCRIPTION = """\
Compile the entry points listed in [tool.hlo-analyzer] of the nearest pyproject.toml, run the rules on the
communication XLA inserted, and fail when a rule fires or a budget is exceeded.

With PATHS (pre-commit passes the changed files), only the entry points whose code, or the project code they
import, lies among or under PATHS are checked. Naming the config file checks them all.

exit status: 0 no findings, 1 findings (at or above --fail-on, not in the baseline), 2 bad usage, bad
config, or an entry point that could not be analysed."""

EPILOG = """\
configuration (pyproject.toml):
  [tool.hlo-analyzer]
  entry-points = ["model.train:train_step"]   # returns (jitted fn, abstract args); takes the mesh
  mesh = { data = 4, model = 2 }
  hardware = "tpu-v5e"
  baseline = ".hlo-analyzer-baseline.json"

examples:
  hlo-analyzer check                                  # every entry point
  hlo-analyzer check model/layers.py                  # entry points that import model/layers.py
  hlo-analyzer check --output-format sarif -o hlo.sarif
  hlo-analyzer check --output-format github           # annotations in a GitHub Actions job
  hlo-analyzer check --write-baseline                 # accept today's findings; only new ones fail
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="check a project's entry points (pre-commit hook, CI gate)",
        description=DESCRIPTION,
        epilog=EPILOG,
    )
    p.add_argument("paths", nargs="*", metavar="PATHS", help="changed files or folders (default: check everything)")
    p.add_argument("--config", metavar="FILE", help="pyproject.toml to read (default: the nearest one with "
                   "[tool.hlo-analyzer], from the current folder up)")
    p.add_argument("--output-format", choices=OUTPUT_FORMATS, default="text", help="text (default), json, "
                   "github (workflow annotations) or sarif (SARIF 2.1.0)")
    p.add_argument("-o", "--output-file", metavar="FILE", help="write the output there instead of stdout")
    p.add_argument("--baseline", metavar="FILE", help=f"findings listed in FILE do not fail (default: the config's "
                   f"`baseline`); with --write-baseline, where to write (default: {DEFAULT_BASELINE})")
    p.add_argument("--write-baseline", action="store_true", help="record the current findings of the entry points "
                   "that ran in the baseline file (entries of the others are kept) and exit 0")
    p.add_argument("--baseline-tolerance", metavar="FRACTION", type=float, help="a baselined finding whose cost "
                   "per step grew by more than this fraction is new again (default: the config's "
                   "`baseline-tolerance`, else 0.10)")
    p.add_argument("--show-baselined", action="store_true", help="also list findings the baseline tolerates")
    p.add_argument("--fail-on", choices=("info", "warning", "error"), default="warning",
                   help="lowest severity that fails the check (default: warning)")
    p.add_argument("--mesh", metavar="AXES", help="override the config's mesh, e.g. data=4,model=2")
    p.add_argument("--hardware", metavar="NAME", help="override the config's hardware, e.g. tpu-v5p")
    p.add_argument("--target", metavar="TARGET", help="override the config's target: cpu or tpu:v5e:2x4")
    p.add_argument("--select", metavar="CODES", help="comma-separated codes or prefixes; replaces the config's")
    p.add_argument("--ignore", metavar="CODES", help="comma-separated codes or prefixes, added to the config's")
    from analyzer.cli._analysis_output import add_timeout_option

    add_timeout_option(p, "each entry point (import, call, compile); default: the config's `timeout`, else none")
    p.set_defaults(func=run)


def _codes(text: str | None) -> list[str] | None:
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


def _load(args: argparse.Namespace):
    """The config to use and the project root it lives in."""
    from analyzer.workflows.config import find_config, load_config

    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise ConfigError("no such config file", path=str(path))
    else:
        path = find_config(Path.cwd())
        if path is None:
            raise ConfigError(
                "no pyproject.toml with a [tool.hlo-analyzer] table in this folder or above; add one with "
                "`entry-points = [\"module:function\"]` and `mesh = { data = 4 }`, or pass --config FILE",
                path=str(Path.cwd()),
            )
    config = load_config(path)
    overrides = {}
    if args.hardware:
        overrides["hardware"] = args.hardware
    if args.target:
        overrides["target"] = args.target
    if getattr(args, "baseline_tolerance", None) is not None:
        overrides["baseline_tolerance"] = args.baseline_tolerance
    if args.mesh:
        from analyzer.compile.lower import parse_mesh

        overrides["mesh"] = parse_mesh(args.mesh)
    if args.timeout is not None:
        overrides["timeout"] = args.timeout
    if args.hardware or args.target:
        from analyzer.workflows.config import check_plan_keys

        check_plan_keys(args.hardware, None, args.target)
    config = config.override(select=_codes(args.select), ignore=_codes(args.ignore), where="command line",
                                   **overrides)
    return config, path.resolve().parent


def run(args: argparse.Namespace) -> int:
    from analyzer.fileio import check_writable
    from analyzer.workflows.check import mesh_size, prepare_cpu_devices, run_check
    from analyzer.rules.baseline import read_baseline, update_baseline

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:  # a typo must not check nothing and pass
        raise ConfigError(f"no such file or folder: {', '.join(map(repr, missing))}; PATHS are the changed files "
                          "or folders whose entry points to check", path=str(Path(missing[0])))
    if args.output_file:
        check_writable(args.output_file, what="output file (-o)")
    config, root = _load(args)
    prepare_cpu_devices(mesh_size(config.mesh))  # compile every entry point in this process
    configured = Path(config.baseline) if config.baseline else None
    if configured is not None and not configured.is_absolute():
        configured = root / configured
    baseline_path = Path(args.baseline) if args.baseline else configured
    if args.write_baseline:  # find an unwritable baseline now, not after every compile
        check_writable(baseline_path or root / DEFAULT_BASELINE, what="baseline")
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    if baseline_path is not None and not args.write_baseline:
        if baseline_path.exists():
            accepted = read_baseline(baseline_path)
            counts, seconds = dict(accepted.counts), dict(accepted.seconds)
        elif args.baseline:  # named on the command line: it must exist
            raise ConfigError("no such baseline file (create it with --write-baseline)", path=str(baseline_path))
    progress = None
    if sys.stderr.isatty() and args.output_format == "text":
        progress = lambda name: print(f"checking {name} ...", file=sys.stderr)  # noqa: E731
    result = run_check(
        config,
        root=root,
        paths=args.paths,
        baseline=counts,
        baseline_path=baseline_path if counts else None,
        baseline_seconds=seconds,
        fail_on=args.fail_on,
        progress=progress,
    )
    if args.write_baseline:
        target = baseline_path or root / DEFAULT_BASELINE
        # Only the entry points that were analysed replace their entries; the others' entries stay.
        ran = {o.entry.name: [*o.findings, *o.baselined] for o in result.outcomes if o.error is None}
        complete = not result.skipped and not result.errors
        _, kept = update_baseline(target, ran, configured=config.entry_points, complete=complete)
        n = sum(len(v) for v in ran.values())
        also = f"; kept {kept} entr{'y' if kept == 1 else 'ies'} of entry points that did not run" if kept else ""
        print(f"hlo-analyzer: wrote {n} finding(s) of {len(ran)} entry point(s) to {target}{also}", file=sys.stderr)
        for error in result.errors:
            print(f"hlo-analyzer: error: {error}", file=sys.stderr)
        return 2 if result.errors else 0
    text = _render(result, args.output_format, show_baselined=args.show_baselined)
    if args.output_file:
        from analyzer.fileio import write_atomic

        write_atomic(args.output_file, text, what="output file (-o)")
    else:
        sys.stdout.write(text)
    return result.exit_code


def _render(result, fmt: str, *, show_baselined: bool) -> str:
    from analyzer.render import findings, github, sarif

    if fmt == "json":
        return findings.render_json(result)
    if fmt == "github":
        return github.render(result.findings, root=result.root, errors=result.located_errors)
    if fmt == "sarif":
        name = result.baseline_path.name if result.baseline_path else "file"
        return sarif.render(result.findings, root=result.root, errors=result.errors, baselined=result.baselined,
                            baseline_name=name)
    return findings.render_text(result, show_baselined=show_baselined)
