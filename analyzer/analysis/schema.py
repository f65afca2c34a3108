"""The report's table columns and schema version: what the renderers and the JSON form rely on.

Kept apart from `analyzer.analysis.report` so that code can read the schema without importing the `Report`
class and pandas (a rebuilt report's rows are checked here, `check_collective_row`).
"""

from __future__ import annotations

__all__ = ["COLLECTIVE_COLUMNS", "DOT_COLUMNS", "REPORT_SCHEMA_VERSION", "check_collective_row"]

REPORT_SCHEMA_VERSION = "1"

# Columns of Report.collectives, in order. The first ten are the public API of DESIGN.md.
COLLECTIVE_COLUMNS: tuple[str, ...] = (
    "kind",            # all-gather | reduce-scatter | all-reduce | all-to-all | collective-permute | ...
    "axes",            # tuple of user mesh axis names, major to minor ("X", "Y"); sub-axes as "X:(pre)size"
    "notation",        # e.g. "AllGather_Y: [E_Y, F] -> [E, F]"
    "dtype",           # element type of the data moved, e.g. "bf16"
    "bytes",           # V of the chapter: bytes of the full (gathered / unreduced) array the collective moves
    "count",           # executions per call of the function (loop trip counts multiplied in)
    "seconds",         # predicted seconds of one execution on the target hardware and topology
    "regime",          # "bandwidth" | "latency"
    "op_name",         # the jax op that caused it (metadata op_name)
    "source",          # user "file:line", or "" when unknown
    # More detail, for rules and reports:
    "total_seconds",   # seconds * count
    "per_device_bytes",  # bytes each device sends/holds of the operand (shard size)
    "group_size",      # devices per replica group
    "num_groups",      # number of replica groups
    "sync",            # False for -start/-done pairs and async wrappers
    "overlapped",      # True when the compiler overlaps it with compute (collective matmul, async fusion)
    "permute_steps",   # for decomposed rings: how many collective-permute steps implement it
    "pass_",           # "forward" | "backward" | "" (from op_name transpose/jvp markers)
    "computation",     # HLO computation holding it
    "instruction",     # HLO instruction name(s), comma-separated for merged forms
    "hlo_line",        # line of the instruction in the HLO text
    "hops",            # hops on the longest path (cost model)
    "formula",         # the cost formula used, human readable
    "original_ops",    # e.g. "all-reduce + dynamic-slice" when the row was recognised from a pattern
    "op",              # the jax primitive that caused it (last element of op_name: dot_general, psum...)
    "global_shape",    # dims of the whole array per device group, as the notation's letters describe it
    "branch",          # conditional branches on its call path ("%cond[1]"), "" when none
    "context",         # the library frame the user's line called into: "in transformers' modeling_flax_llama.py:412"
    "array",           # the array it moves: the argument's pytree path (params['mlp']['w_in']), "" when computed
    "declared",        # where the sharding behind it was declared (a with_sharding_constraint's file:line), or ""
    "exposed_seconds",  # seconds of the step the compute waits for it, all executions together (analysis.step)
)

# Columns of Report.dots: every dot/convolution with its FLOPs, for the roofline and the matmul rules.
DOT_COLUMNS: tuple[str, ...] = (
    "instruction", "computation", "op_name", "source", "flops", "count", "seconds",
    "lhs_shape", "rhs_shape", "out_shape", "contracting", "notation", "dtype",
    "pass_",           # "forward" / "backward" / "" from the op_name (analyzer.analysis.mapping.pass_of)
    "redundancy",      # the op's FLOPs on all chips / its model FLOPs (1: no repeat; NaN: unknown)
)

# JSON types of the collective columns (docs/report-schema.json), for checking a report read from a file:
# "int" (not bool), "num" (int or float, not bool), "str", "bool", "strs" (list of strings), "ints".
# Every column may be null (a report from an older tool, or a column a producer left out) but `kind`.
_COLUMN_TYPES: dict[str, str] = {
    "kind": "str", "axes": "strs", "notation": "str", "dtype": "str", "bytes": "int", "count": "int",
    "seconds": "num", "regime": "str", "op_name": "str", "source": "str", "total_seconds": "num",
    "per_device_bytes": "int", "group_size": "int", "num_groups": "int", "sync": "bool", "overlapped": "bool",
    "permute_steps": "int", "pass_": "str", "computation": "str", "instruction": "str", "hlo_line": "int",
    "hops": "int", "formula": "str", "original_ops": "str", "op": "str", "global_shape": "ints", "branch": "str",
    "context": "str", "array": "str", "declared": "str", "exposed_seconds": "num",
}
_TYPE_WORDS = {"int": "an integer", "num": "a number", "str": "a string", "bool": "true or false",
               "strs": "a list of strings", "ints": "a list of integers"}
# Counts and sizes that cannot be negative.
_NON_NEGATIVE = ("bytes", "count", "seconds", "total_seconds", "per_device_bytes", "group_size", "num_groups",
                 "exposed_seconds")


def _is(kind: str, value: object) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    item = "str" if kind == "strs" else "int"
    return isinstance(value, list | tuple) and all(_is(item, v) for v in value)


def check_collective_row(row: object, *, where: str, index: int) -> None:
    """Check one `collectives` row of a report read from JSON against the schema's column types.

    Args:
      row: the row as parsed.
      where: the file (or other source) it came from, for the message.
      index: its 0-based position in `collectives`.

    Raises:
      AnalyzerError: naming the file, the row and the field, what it holds and what it should.

    Example:
        >>> check_collective_row({"kind": "all-gather", "bytes": "lots"}, where="r.json", index=3)
        Traceback (most recent call last):
          ...
        analyzer.errors.AnalyzerError: r.json: collectives[3] (all-gather): 'bytes' must be an integer or null, got 'lots'
    """
    from analyzer.errors import AnalyzerError

    if not isinstance(row, dict):
        raise AnalyzerError(f"{where}: collectives[{index}] must be a JSON object (one collective), got "
                            f"{type(row).__name__}")
    label = f"{where}: collectives[{index}]" + (f" ({row['kind']})" if isinstance(row.get("kind"), str) else "")
    if not isinstance(row.get("kind"), str):
        raise AnalyzerError(f"{label}: 'kind' must be a string (all-gather, reduce-scatter, ...), got "
                            f"{row.get('kind')!r}")
    for column, kind in _COLUMN_TYPES.items():
        value = row.get(column)
        if value is None:
            continue
        if not _is(kind, value):
            raise AnalyzerError(f"{label}: {column!r} must be {_TYPE_WORDS[kind]} or null, got {value!r:.60}")
        if column in _NON_NEGATIVE and value < 0:
            raise AnalyzerError(f"{label}: {column!r} must not be negative, got {value!r}")
