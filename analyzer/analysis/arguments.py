"""The program's arguments as the user sharded them: one row per array, its shape and its sharding in notation.

The plan as the user wrote it, shown by the Markdown and HTML reports and kept in the report's JSON form
(`arguments`), from which `report_from_dict` restores it. (The rules read the arguments as typed arrays instead:
`analyzer.rules.arguments`.)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from analyzer.errors import ShardingError
from analyzer.theory.dtypes import xla_dtype

if TYPE_CHECKING:
    from analyzer.analysis.context import AnalysisContext
    from analyzer.theory.mesh import MeshInfo

__all__ = ["argument_rows"]


def argument_rows(analysis: AnalysisContext, mesh: MeshInfo | None) -> list[dict[str, Any]]:
    """The program's arguments and their shardings in the chapter's notation: the plan as the user wrote it.

    Read from `analysis.args` (the abstract arguments `analyze` was given) or, for a report rebuilt from JSON,
    `analysis.argument_rows`. Dimension letters are I, J, K, ... in order, or the logical axis names a Flax
    parameter declares (`nn.with_logical_partitioning`: `[embed_data, mlp_model]`).

    Args:
      analysis: a report's `AnalysisContext` (`report.analysis`).
      mesh: the report's mesh (`report.mesh`); None for a dump read without one.

    Returns:
      One dict per array argument: `name`, `shape` (e.g. `bf16[16,2048,5632]`), `notation`
      (e.g. `[I, J_data, K_model]`, "" when the sharding is unknown) and `bytes_per_device` (None when unknown).
      Empty when the report carries no arguments (HLO dumps).
    """
    if analysis.argument_rows is not None:
        return [dict(r) for r in analysis.argument_rows]
    args = analysis.args
    if not args or mesh is None:
        return []
    import jax

    from analyzer.analysis.mapping import logical_names
    from analyzer.errors import AnalyzerError
    from analyzer.theory.notation import Notation

    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    declared = logical_names(args)  # Flax's logical axis names, by the path inside each argument
    rows = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(args))[0]:
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            continue
        short = _short_dtype(str(getattr(dtype, "name", dtype)))
        row = {"name": _path_name(path), "shape": f"{short}[{','.join(str(d) for d in shape)}]", "notation": "",
               "bytes_per_device": None}
        spec = getattr(getattr(leaf, "sharding", None), "spec", None)
        if spec is not None:
            try:
                n = Notation.from_partition_spec(tuple(shape), spec, sizes, dtype=dtype)
                # One axis prints bare (J_data), as the collectives' notation does; several keep braces.
                row["notation"] = re.sub(r"_\{([^{},]+)\}", r"_\1", str(n))
                names = declared.get(jax.tree_util.keystr(tuple(path[1:])))
                if names is not None and len(names) == len(shape):  # the program's names for the dims
                    dims = row["notation"][1:-1].split(", ") if shape else []
                    row["notation"] = "[" + ", ".join(name + d[1:] for name, d in zip(names, dims)) + "]"
                row["bytes_per_device"] = int(n.bytes_per_device)
            except AnalyzerError:
                pass
        rows.append(row)
    return rows


def _path_name(path: Any) -> str:
    """`arg0.w_in`, `arg1.mu.w_in`, `arg2[0]` from a jax key path whose first key is the argument index."""
    parts = []
    for i, key in enumerate(path):
        idx = getattr(key, "idx", None)
        name = getattr(key, "key", None)
        attr = getattr(key, "name", None)
        if i == 0 and idx is not None:
            parts.append(f"arg{idx}")
        elif idx is not None:
            parts.append(f"[{idx}]")
        elif isinstance(name, str) and name.isidentifier():
            parts.append(f".{name}")
        elif name is not None:
            parts.append(f"[{name!r}]")
        elif attr is not None:
            parts.append(f".{attr}")
        else:
            parts.append(str(key))
    return "".join(parts).lstrip(".") or "arg"


def _short_dtype(name: str) -> str:
    """XLA's short dtype names, as the HLO and the notation print them."""
    try:
        return xla_dtype(name)
    except ShardingError:
        return name
