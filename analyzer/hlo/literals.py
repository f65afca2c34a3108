"""Whether a literal (a constant's value, a custom-call's `literal=`) fits its shape, as XLA's parser checks it:
nesting and element counts per dimension, the kind of each scalar, integer ranges, float ranges and NaN payloads.

A literal is the parser's tuple `(text, kind, items)`: kind `a` an array `{...}`, `p` a tuple `( ... )`, `t` a
value with its own shape first, `s` a scalar, `e` elided by the printer. Used by the verifier (constants) and by
`attributes.parse_literal_attribute` (custom-call `literal=`), which is why it lives in neither.
"""

from __future__ import annotations

import re
from typing import Any

from analyzer.errors import HloSyntaxError
from analyzer.hlo.shapes import ELEMENT_BITS, Shape, decode_array_shape

__all__ = ["check_literal"]

_INT_TYPES = frozenset(t for t in ELEMENT_BITS if t[0] in "su")


def _syntax(msg: str, tok: Any, offset: int = 0) -> HloSyntaxError:
    return HloSyntaxError(msg, line=tok.line, column=tok.column + offset)


def check_literal(lit: tuple, shape: Shape, tok: Any) -> None:
    """Check that a literal's nesting, element counts and scalar kinds fit its shape, as XLA does.

    Raises:
      HloSyntaxError: at the literal, saying what the shape needs.
    """
    text, kind, items = lit
    if kind == "e" or (kind == "a" and len(items) == 1 and items[0][1] == "e"):
        return  # `{...}`: elided by the printer, XLA fills it in
    if kind == "t":
        shape_tok, inner = items
        try:
            declared = decode_array_shape(str(shape_tok))
        except ValueError as e:
            raise _syntax(str(e), shape_tok) from None
        if str(declared) != str(shape):
            raise _syntax(f"the literal's shape {declared} differs from the instruction's shape {shape}", shape_tok)
        check_literal(inner, shape, tok)
        return
    if shape.is_tuple:
        if kind != "p" or len(items) != len(shape.tuple_shapes):
            raise _syntax(f"expected a tuple literal `( ... )` with {len(shape.tuple_shapes)} elements for shape "
                          f"{shape}", tok, len(tok))
        for item, sub in zip(items, shape.tuple_shapes):
            check_literal(item, sub, tok)
        return
    if shape.is_token:
        raise _syntax("a token has no literal", tok, len(tok))
    _check_array_literal(lit, shape, 0, tok)


def _check_array_literal(lit: tuple, shape: Shape, level: int, tok: Any) -> None:
    text, kind, items = lit
    dims = shape.dims
    if level < len(dims):
        if kind != "a":
            raise _syntax(f"expected {{...}} for dimension {level} of shape {shape}, got `{text[:30]}`", tok, len(tok))
        if len(items) == 1 and items[0][1] == "e":
            return
        if len(items) != dims[level] and not shape.dynamic:
            raise _syntax(f"expected {dims[level]} elements in dimension {level} of shape {shape}, got {len(items)}",
                          tok, len(tok))
        for item in items:
            _check_array_literal(item, shape, level + 1, tok)
        return
    _check_scalar(lit, shape.element_type, tok)


# Largest finite value and the width of the last step below infinity (values at or past the midpoint
# round to infinity, which XLA's parser rejects as out of range), and the mantissa bits that bound a NaN
# payload (None: the type has no NaN payloads).
_FLOAT_LIMITS: dict[str, tuple[float, float, int | None]] = {
    "f16": (65504.0, 32.0, 10),
    "bf16": ((2 - 2**-7) * 2.0**127, 2.0**120, 7),
    "f32": ((2 - 2**-23) * 2.0**127, 2.0**104, 23),
    "f64": (1.7976931348623157e308, 0.0, 52),
}
_NO_NAN_PAYLOAD = frozenset({"f8e4m3fn", "f8e4m3b11fnuz", "f8e4m3fnuz", "f8e5m2fnuz", "f8e8m0fnu", "f4e2m1fn"})
_NAN_RE = re.compile(r"-?nan(?:\(0x([0-9a-fA-F]+)\))?$")


def _check_scalar(lit: tuple, etype: str, tok: Any) -> None:
    """Check one scalar of element type `etype` (a complex value is a pair of them) as XLA's parser does."""
    text, kind, value = lit
    if etype in ("c64", "c128"):
        _check_complex(lit, etype, tok)
        return
    if kind != "s":
        raise _syntax(f"expected a scalar {etype} value, got `{text[:30]}`", tok, len(tok))
    if etype == "pred":  # XLA takes true, false or an integer (non-zero is true)
        if text not in ("true", "false") and not re.fullmatch(r"-?\d+", text):
            raise _syntax(f"expected a pred value (true, false or an integer), got `{text}`", value)
        return
    if text in ("true", "false"):
        raise _syntax(f"expected a number for {etype}, got `{text}`", value)
    if etype in _INT_TYPES:
        _check_integer(text, etype, value)
    else:
        _check_float(text, etype, value)


def _check_complex(lit: tuple, etype: str, tok: Any) -> None:
    """A c64/c128 value: a pair `(re, im)` of f32/f64 scalars, or one real scalar."""
    text, kind, value = lit
    part = "f32" if etype == "c64" else "f64"
    if kind == "p" and len(value) == 2 and all(v[1] == "s" for v in value):
        for v in value:
            _check_scalar(v, part, tok)
        return
    if kind == "s":
        _check_scalar(lit, part, tok)
        return
    raise _syntax(f"expected a complex value like `(1, 2)`, got `{text[:30]}`", tok, len(tok))


def _check_integer(text: str, etype: str, tok: Any) -> None:
    """An integer scalar: digits only, within the range of `etype` (u64 also takes int64's negatives)."""
    if not re.fullmatch(r"-?\d+", text):
        raise _syntax(f"expected an integer for {etype}, got `{text}`", tok)
    bits = ELEMENT_BITS[etype]
    v = int(text)
    if etype[0] == "s":
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    elif etype == "u64":  # XLA reads u64 through int64 and reinterprets: -1 is accepted
        lo, hi = -(1 << 63), (1 << 64) - 1
    else:
        lo, hi = 0, (1 << bits) - 1
    if not lo <= v <= hi:
        raise _syntax(f"{text} is out of range for {etype} [{lo}, {hi}]", tok)


def _check_float(text: str, etype: str, tok: Any) -> None:
    """A floating-point scalar: a NaN whose payload fits the mantissa, an infinity, or a finite value that does
    not round to infinity in `etype`."""
    nan = _NAN_RE.match(text)
    if nan:
        if nan.group(1) is not None:
            payload = int(nan.group(1), 16)
            bits = _FLOAT_LIMITS.get(etype, (0, 0, None))[2]
            if etype in _NO_NAN_PAYLOAD or (bits is not None and payload >= (1 << bits)) or payload == 0:
                raise _syntax(f"NaN payload 0x{nan.group(1)} does not fit {etype}", tok)
        return
    if text.lstrip("-") == "inf":
        return
    limits = _FLOAT_LIMITS.get(etype)
    if limits is not None:
        top, step, _ = limits
        v = abs(float(text))
        if v == float("inf") or (step and v >= top + step / 2) or (not step and v > top):
            raise _syntax(f"{text} is out of range for {etype} (largest finite value {top:g})", tok)
