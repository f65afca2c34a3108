"""The report's table columns and schema version: what the renderers and the JSON form rely on.

Kept apart from `analyzer.analysis.report` so that renderers can read the schema without importing the
`Report` class (which imports the renderers for its `to_*` methods).
"""

from __future__ import annotations

__all__ = ["COLLECTIVE_COLUMNS", "DOT_COLUMNS", "REPORT_SCHEMA_VERSION"]

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
)
