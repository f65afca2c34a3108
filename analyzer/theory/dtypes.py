"""Element types: the spellings people write (numpy/jax names, ML shorthand) -> XLA's primitive types.

The sizes come from one table, `analyzer.hlo.ir.ELEMENT_BITS` (xla_data.proto's primitive types, which the
parser checks HLO shapes against); this module only adds the other names of each type, so the notation's
byte counts, the hardware spec's `[flops]` keys, the report config's `dtype` and the renderers' short names
all read the same facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analyzer.errors import ShardingError, valid_choices
from analyzer.hlo.ir import ELEMENT_BITS

__all__ = ["xla_dtype", "dtype_bytes", "numpy_name", "flops_key", "spellings"]

# XLA primitive type -> its numpy/jax name first, then other spellings people write.
_SPELLINGS: Mapping[str, tuple[str, ...]] = {
    "pred": ("bool",),
    "s2": ("int2",), "s4": ("int4",), "s8": ("int8",), "s16": ("int16",), "s32": ("int32",), "s64": ("int64",),
    "u2": ("uint2",), "u4": ("uint4",), "u8": ("uint8",), "u16": ("uint16",), "u32": ("uint32",),
    "u64": ("uint64",),
    "f16": ("float16", "fp16", "half"), "bf16": ("bfloat16",), "f32": ("float32", "fp32"),
    "f64": ("float64", "fp64"),
    "f8e4m3fn": ("float8_e4m3fn", "fp8"), "f8e5m2": ("float8_e5m2",), "f8e4m3": ("float8_e4m3",),
    "f8e3m4": ("float8_e3m4",), "f8e4m3fnuz": ("float8_e4m3fnuz",), "f8e5m2fnuz": ("float8_e5m2fnuz",),
    "f8e4m3b11fnuz": ("float8_e4m3b11fnuz",), "f8e8m0fnu": ("float8_e8m0fnu",),
    "f4e2m1fn": ("float4_e2m1fn", "fp4"),
    "c64": ("complex64",), "c128": ("complex128",),
}

# Every name -> the XLA type; types without a size (token, opaque) are not element types of data.
_TO_XLA: Mapping[str, str] = {
    **{t: t for t, bits in ELEMENT_BITS.items() if bits > 0},
    **{s: t for t, names in _SPELLINGS.items() for s in names},
}


def xla_dtype(dtype: Any) -> str:
    """XLA's name for a dtype given as any spelling (`"bfloat16"`, `"fp32"`, `"int8"`) or a numpy/jax dtype.

    Raises:
      ShardingError: an unknown dtype, listing the known names.

    Example:
      >>> xla_dtype("bfloat16"), xla_dtype("int8"), xla_dtype("f32")
      ('bf16', 's8', 'f32')
    """
    name = (getattr(dtype, "name", None) or str(dtype)).lower()
    try:
        return _TO_XLA[name]
    except KeyError:
        raise ShardingError(f"unknown dtype {name!r}; {valid_choices(name, _TO_XLA, what='dtypes')}") from None


def dtype_bytes(dtype: Any) -> float:
    """Bytes per element of a dtype name (`"bf16"`, `"float32"`, `"s8"`...) or a numpy/jax dtype.

    Raises:
      ShardingError: an unknown dtype, listing the known names.

    Example:
      >>> dtype_bytes("bf16"), dtype_bytes("int4")
      (2.0, 0.5)
    """
    return ELEMENT_BITS[xla_dtype(dtype)] / 8


def numpy_name(dtype: Any) -> str:
    """The numpy/jax name of a dtype (`"bf16"` -> `"bfloat16"`).

    Example:
      >>> numpy_name("fp32")
      'float32'
    """
    return _SPELLINGS[xla_dtype(dtype)][0]


def spellings(xla: str) -> tuple[str, ...]:
    """Every name that means the XLA type `xla`, its own first.

    Example:
      >>> spellings("f16")
      ('f16', 'float16', 'fp16', 'half')
    """
    return (xla, *_SPELLINGS.get(xla, ()))


def flops_key(dtype: Any) -> str:
    """The key of a hardware spec's `[flops]` table for a dtype: the integer and 8/4-bit float families share
    one peak (`"s8"` -> `"int8"`, `"f8e4m3fn"` -> `"fp8"`); an unknown name comes back lower-cased.

    Example:
      >>> flops_key("f8e4m3fn"), flops_key("bfloat16"), flops_key("u8")
      ('fp8', 'bf16', 'int8')
    """
    name = (getattr(dtype, "name", None) or str(dtype)).lower()
    xla = _TO_XLA.get(name)
    if xla is None:
        return name
    if xla[0] in "su" and xla[1:] in ("8", "4"):
        return f"int{xla[1:]}"
    if xla.startswith("f8"):
        return "fp8"
    if xla.startswith("f4"):
        return "fp4"
    return xla
