"""`hlo-analyzer check [PATHS]`: the pre-commit hook and CI gate (logic in analyzer/workflows/check.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyzer.errors import ConfigError
from analyzer.formats import choices_text, names, renderer
from analyzer.numeric import finite_float, number_problem

OUTPUT_FORMATS = names("check")  # analyzer/formats.py: every format that renders a check result
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
  cache-inputs = ["configs/*.yaml"]           # files the entry points read at run time (part of the cache key)

results are cached in .hlo-analyzer-cache/ at the project root (`cache-dir` moves it, `cache = false` or
--no-cache turns it off, --clear-cache empties it): an entry point whose code, imported project modules,
config, hardware specs, installed packages and XLA_FLAGS/LIBTPU_INIT_ARGS/JAX_* are unchanged is answered
from there, without importing jax. A new finding says what changed in the plan since the last check.

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
    p.add_argument("--output-format", choices=OUTPUT_FORMATS, default="text",
                   help=choices_text("check", default="text"))
    p.add_argument("-o", "--output-file", metavar="FILE", help="write the output there instead of stdout")
    p.add_argument("--baseline", metavar="FILE", help=f"findings listed in FILE do not fail (default: the config's "
                   f"`baseline`); with --write-baseline, where to write (default: {DEFAULT_BASELINE})")
    p.add_argument("--write-baseline", action="store_true", help="record the current findings of the entry points "
                   "that ran in the baseline file (entries of the others are kept) and exit 0")
    p.add_argument("--baseline-tolerance", metavar="FRACTION", type=finite_float("--baseline-tolerance", minimum=0),
                   help="a baselined finding whose cost "
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
    from analyzer.cli._analysis_output import add_timeout_option, add_xla_flags_option

    add_timeout_option(p, "each entry point (import, call, compile); default: the config's `timeout`, else none")
    add_xla_flags_option(p, "replaces the config's `xla-flags`")
    p.add_argument("--no-cache", action="store_true", help="compile every selected entry point, neither reading nor "
                   "writing the result cache (.hlo-analyzer-cache/; also `cache = false` in the config)")
    p.add_argument("--clear-cache", action="store_true", help="empty the result cache before checking")
    from analyzer.cli.sweep import _jobs  # one reading of --jobs for both commands

    p.add_argument("-j", "--jobs", metavar="N", type=_jobs, default=None, help="compile up to N entry points at "
                   "once, in worker processes (default: the number of CPUs); output keeps the configured order")
    p.set_defaults(func=run)



def _codes(text: str | None) -> list[str] | None:
    return None if text is None else [c.strip() for c in text.split(",") if c.strip()]


def _config_path(args: argparse.Namespace) -> Path:
    """The config file: --config, else the nearest pyproject.toml with [tool.hlo-analyzer]."""
    from analyzer.rules.config import find_config

    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise ConfigError("no such config file", path=str(path))
        return path
    path = find_config(Path.cwd())
    if path is None:
        raise ConfigError(
            "no pyproject.toml with a [tool.hlo-analyzer] table in this folder or above; add one with "
            "`entry-points = [\"module:function\"]` and `mesh = { data = 4 }`, or pass --config FILE",
            path=str(Path.cwd()),
        )
    return path


def _load(args: argparse.Namespace, path: Path):
    """The config to use and the project root it lives in."""
    from analyzer.rules.config import load_config

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
    if getattr(args, "xla_flags", None):
        from analyzer.compile.xlaflags import parse_xla_flags

        overrides["xla_flags"] = parse_xla_flags(args.xla_flags)  # replaces the config's
    if args.hardware or args.target:
        from analyzer.rules.config import check_plan_keys

        check_plan_keys(args.hardware, None, args.target)
    config = config.override(select=_codes(args.select), ignore=_codes(args.ignore), where="command line",
                                   **overrides)
    return config, path.resolve().parent


def _raw_table(path: Path) -> dict | None:
    """`[tool.hlo-analyzer]` as written (not validated), or None when the file does not parse (the full load
    then reports it)."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    table = data.get("tool", {}).get("hlo-analyzer") if isinstance(data.get("tool"), dict) else None
    return table if isinstance(table, dict) else None


def _analysis_options(args: argparse.Namespace) -> dict:
    """The command-line options that change an entry point's result (part of the cache key)."""
    return {"mesh": args.mesh, "hardware": args.hardware, "target": args.target, "select": args.select,
            "ignore": args.ignore, "timeout": args.timeout, "xla_flags": getattr(args, "xla_flags", None)}


def _baseline(args: argparse.Namespace, root: Path, configured_name):
    """(baseline path or None, configured path or None, counts, seconds) as the options and config say."""
    from analyzer.rules.baseline import read_baseline

    configured = Path(configured_name) if configured_name else None
    if configured is not None and not configured.is_absolute():
        configured = root / configured
    baseline_path = Path(args.baseline) if args.baseline else configured
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    if baseline_path is not None and not args.write_baseline:
        if baseline_path.exists():
            accepted = read_baseline(baseline_path)
            counts, seconds = dict(accepted.counts), dict(accepted.seconds)
        elif args.baseline:  # named on the command line: it must exist
            raise ConfigError("no such baseline file (create it with --write-baseline)", path=str(baseline_path))
    return baseline_path, configured, counts, seconds


def _replay(args: argparse.Namespace, table: dict, root: Path, path: Path, cache, keys):
    """The check from the cache alone (no config validation, no jax): the result, or None to compute."""
    from analyzer.workflows.check import replay_check
    from analyzer.rules.config import DEFAULT_BASELINE_TOLERANCE

    configured = table.get("baseline")
    tolerance = args.baseline_tolerance if args.baseline_tolerance is not None else table.get(
        "baseline-tolerance", table.get("baseline_tolerance", DEFAULT_BASELINE_TOLERANCE))
    if configured is not None and not isinstance(configured, str):
        return None  # the full load explains what is wrong
    if number_problem(tolerance, minimum=0):  # NaN too: the full load explains what is wrong
        return None
    baseline_path, _, counts, seconds = _baseline(args, root, configured)
    return replay_check(table, root=root, config_path=path, cache=cache, keys=keys, paths=args.paths,
                        baseline=counts, baseline_path=baseline_path if counts else None, baseline_seconds=seconds,
                        tolerance=float(tolerance), fail_on=args.fail_on)


def run(args: argparse.Namespace) -> int:
    import os

    from analyzer.fileio import check_writable

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:  # a typo must not check nothing and pass
        raise ConfigError(f"no such file or folder: {', '.join(map(repr, missing))}; PATHS are the changed files "
                          "or folders whose entry points to check", path=str(Path(missing[0])))
    if args.output_file:
        check_writable(args.output_file, what="output file (-o)")
    path = _config_path(args)
    root = path.resolve().parent
    table = _raw_table(path)
    _refuse_inputs(args, path, root, table)  # -o or the baseline written must not replace what the run reads
    cache, keys = _open_cache(args, table, root, path)
    if cache is not None and keys is not None and not args.write_baseline:
        result = _replay(args, table, root, path, cache, keys)
        if result is not None:
            return _emit(result, args)
    from analyzer.workflows.check import maxtext_devices, mesh_size, prepare_cpu_devices, run_check

    config, root = _load(args, path)
    # compile every entry point in this process (a maxtext: one on the chips of its compile_topology)
    prepare_cpu_devices(max(mesh_size(config.mesh), maxtext_devices(config.entry_points)))
    baseline_path, configured, counts, seconds = _baseline(args, root, config.baseline)
    if args.write_baseline:  # find an unwritable baseline now, not after every compile
        check_writable(baseline_path or root / DEFAULT_BASELINE, what="baseline")
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
        cache=cache,
        keys=keys,
        jobs=args.jobs or os.cpu_count() or 1,
        outputs=every_output,
    )
    if cache is not None and cache.note:
        print(f"hlo-analyzer: note: {cache.note}", file=sys.stderr)
    if args.write_baseline:
        return _write_baseline(result, baseline_path or root / DEFAULT_BASELINE, config, configured, path, root)
    return _emit(result, args)


def _open_cache(args: argparse.Namespace, table: dict | None, root: Path, path: Path):
    """(the result cache, this run's key inputs), or (None, None) when the config turns the cache off or does not
    parse; --clear-cache empties it first. The key inputs are read before anything changes the environment (the
    fake device count)."""
    from analyzer.workflows.cache import cache_settings, key_context, open_cache

    if table is None:
        return None, None
    settings = cache_settings(root, table, no_cache=args.no_cache, config_path=path)
    if args.clear_cache and settings.folder is not None:
        from analyzer.workflows.cache import ResultCache

        if ResultCache(settings.folder).clear():
            print(f"hlo-analyzer: cleared the result cache {settings.folder}", file=sys.stderr)
    cache = open_cache(settings)
    if cache is None:
        return None, None
    return cache, key_context(root, table, config_path=path.resolve(), overrides=_analysis_options(args),
                              cache_folder=cache.folder)


def _write_baseline(result, target: Path, config, configured: Path | None, path: Path, root: Path) -> int:
    """--write-baseline: record the findings of the entry points that ran (the others' entries stay), say so, and
    return the exit status (2 when an entry point could not be analysed)."""
    from analyzer.rules.baseline import update_baseline

    ran = {o.entry.name: [*o.findings, *o.baselined] for o in result.outcomes if o.error is None}
    complete = not result.skipped and not result.errors
    _, kept = update_baseline(target, ran, configured=config.entry_points, complete=complete)
    n = sum(len(v) for v in ran.values())
    also = f"; kept {kept} entr{'y' if kept == 1 else 'ies'} of entry points that did not run" if kept else ""
    print(f"hlo-analyzer: wrote {n} finding(s) of {len(ran)} entry point(s) to {target}{also}", file=sys.stderr)
    _say_baseline_line(target, configured, path, root)
    for error in result.errors:
        print(f"hlo-analyzer: error: {error}", file=sys.stderr)
    return 2 if result.errors else 0


def _refuse_inputs(args: argparse.Namespace, path: Path, root: Path, table: dict | None) -> None:
    """Refuse, before any work, an output (-o, the baseline --write-baseline writes) that is a file this run
    reads (the config, an entry point's source, the baseline, a hardware spec), and a baseline to write that
    is something else (analyzer/fileio.py)."""
    from analyzer.fileio import refuse_inputs
    from analyzer.rules.baseline import check_overwritable
    from analyzer.workflows.check import resolve_entry

    table = table or {}
    inputs: list[tuple[str, object]] = [("config", path)]
    entries = table.get("entry-points", table.get("entry_points", []))
    for name in [entries] if isinstance(entries, str) else entries if isinstance(entries, list) else []:
        if isinstance(name, str):
            try:
                inputs.append((f"source of entry point {name!r}", resolve_entry(name, root).file))
            except Exception:  # noqa: BLE001 - an entry point the full load will explain
                pass
    for hardware in (args.hardware, table.get("hardware")):
        if isinstance(hardware, str) and hardware.endswith(".toml"):
            inputs.append(("hardware spec", hardware if Path(hardware).is_absolute() else root / hardware))
    configured = table.get("baseline") if isinstance(table.get("baseline"), str) else None
    baseline = Path(args.baseline) if args.baseline else (root / configured if configured else None)
    if args.write_baseline:
        target = baseline or root / DEFAULT_BASELINE
        refuse_inputs(target, inputs, what="baseline")
        if args.output_file:
            refuse_inputs(args.output_file, [("baseline", target)], what="output file (-o)")
        check_overwritable(target)  # not a baseline (a config named by mistake): never overwritten
    elif baseline is not None:
        inputs.append(("baseline", baseline))
    refuse_inputs(args.output_file, inputs, what="output file (-o)")


def _say_baseline_line(target: Path, configured: Path | None, config: Path, root: Path) -> None:
    """After --write-baseline: the line to add to the config when `check` would not read that file."""
    import os

    same = configured is not None and configured.exists() and target.exists() and os.path.samefile(configured,
                                                                                                    target)
    if same:
        return
    try:
        name = target.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        name = str(target.resolve())
    why = "is not the config's baseline" if configured is not None else "is not read by `check` until the config names it"
    print(f"hlo-analyzer: {name} {why}: add  baseline = {_toml_string(name)}  to [tool.hlo-analyzer] in {config}",
          file=sys.stderr)


def _toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    import json

    return json.dumps(text)


def _emit(result, args: argparse.Namespace) -> int:
    """Write the result in the asked format (stdout or -o) and return the exit status."""
    text = _render(result, args.output_format, show_baselined=args.show_baselined)
    if args.output_file:
        from analyzer.fileio import write_atomic

        write_atomic(args.output_file, text, what="output file (-o)")
    else:
        sys.stdout.write(text)
    return result.exit_code


def _render(result, fmt: str, *, show_baselined: bool) -> str:
    return renderer(fmt, "check")(result, show_baselined=show_baselined)


def every_output(result) -> list[str]:
    """The result in every output format `check` can print (baselined findings shown): what a cached result
    must replay exactly (`run_check`'s `outputs`)."""
    return [_render(result, fmt, show_baselined=True) for fmt in OUTPUT_FORMATS]
