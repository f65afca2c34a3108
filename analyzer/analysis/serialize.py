"""Plain JSON from what the analysis holds: the one conversion every JSON output goes through.

`to_jsonable` turns a value a report, a sweep, a what-if or a diff holds into dict/list/str/int/float/bool/None:
numpy and pandas scalars to Python numbers, tuples to lists, NaN and infinities to None (JSON has neither),
enums to their values, dataclasses to dicts. `dumps` writes such data as strict JSON text (UTF-8 kept, no NaN).
A `Report`'s own dict form is `analyzer.analysis.report.report_to_dict`, built on these; the renderers
(analyzer/render/) and the workflows (sweep, what-if, diff) serialise through here too, never through each other.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["to_jsonable", "dumps"]


def to_jsonable(value: Any) -> Any:
    """Convert one value to plain JSON types.

    Args:
      value: anything a report holds: numbers (Python, numpy, pandas), strings, tuples, mappings,
        dataclasses, enums, None.

    Returns:
      The same data in dict/list/str/int/float/bool/None, with NaN and infinities as None.

    Example:
      >>> to_jsonable({"axes": ("X", "Y"), "t": float("nan")})
      {'axes': ['X', 'Y'], 't': None}
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    item = getattr(value, "item", None)  # numpy / pandas scalars
    if callable(item) and getattr(value, "ndim", 0) == 0:
        return to_jsonable(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return to_jsonable(tolist())
    if _is_pandas_missing(value):
        return None
    return str(value)


def _is_pandas_missing(value: Any) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a base dependency
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def dumps(data: Any, indent: int | None = 2) -> str:
    """JSON-ready data (`to_jsonable`'s output) as strict JSON text: no NaN, non-ASCII kept as written.

    Example:
      >>> dumps({"name": "µs", "n": [1, 2]}, indent=None)
      '{"name": "µs", "n": [1, 2]}'
    """
    return json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False)
