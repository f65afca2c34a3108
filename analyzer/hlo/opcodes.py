"""The HLO opcodes XLA's parser knows, with their operand counts.

Source: XLA's `HLO_OPCODE_LIST` (xla/hlo/ir/hlo_opcode.h): opcode spelling and arity; `None` is variadic.
XLA's parser rejects an unknown opcode and checks the operand count of fixed-arity opcodes, so
`analyzer.parse_hlo` does too. XLA also accepts async "syntax sugar": `<op>-start`, `<op>-update` and
`<op>-done` wrap any opcode in an async computation (e.g. `custom-call-start`).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["OPCODES", "REQUIRED_ATTRIBUTES", "is_known_opcode", "fixed_arity", "base_opcode"]

OPCODES: Mapping[str, int | None] = {
    "abs": 1, "acos": 1, "acosh": 1, "add": 2, "add-dependency": 2, "after-all": None,
    "all-gather": None, "all-gather-done": 1, "all-gather-start": None,
    "all-reduce": None, "all-reduce-done": 1, "all-reduce-start": None, "all-to-all": None,
    "and": 2, "asin": 1, "asinh": 1, "async-done": 1, "async-start": None, "async-update": None,
    "atan": 1, "atan2": 2, "atanh": 1, "batch-norm-grad": 5, "batch-norm-inference": 5,
    "batch-norm-training": 3, "bitcast": 1, "bitcast-convert": 1, "broadcast": 1, "call": None,
    "cbrt": 1, "ceil": 1, "cholesky": 1, "clamp": 3, "count-leading-zeros": 1,
    "collective-broadcast": None, "collective-permute": None, "collective-permute-done": 1,
    "collective-permute-start": None, "collective-reduce": None, "compare": 2, "complex": 2,
    "concatenate": None, "conditional": None, "constant": 0, "convert": 1, "convolution": None,
    "copy": 1, "copy-done": 1, "copy-start": 1, "cosine": 1, "cosh": 1, "custom-call": None,
    "divide": 2, "domain": 1,
    # XLA lists dot with 2 operands, but its parser accepts the sparse form's metadata operands.
    "dot": None,
    "dynamic-reshape": None, "dynamic-slice": None, "dynamic-update-slice": None, "erf": 1,
    "exponential": 1, "exponential-minus-one": 1, "fft": 1, "floor": 1, "fusion": None, "gather": 2,
    "get-dimension-size": 1, "get-tuple-element": 1, "imag": 1, "infeed": 1, "iota": 0, "is-finite": 1,
    "log": 1, "log-plus-one": 1, "logistic": 1, "map": None, "maximum": 2, "minimum": 2, "mulhi": 2,
    "multiply": 2, "negate": 1, "not": 1, "opt-barrier": 1, "or": 2, "outfeed": 2, "pad": 2,
    "parameter": 0, "partition-id": 0, "popcnt": 1, "power": 2, "ragged-all-to-all": 6, "ragged-dot": 3,
    "real": 1, "recv": 1, "recv-done": 1, "reduce": None, "reduce-precision": 1, "reduce-scatter": None,
    "reduce-window": None, "remainder": 2, "replica-id": 0, "reshape": 1, "reverse": 1, "rng": None,
    "rng-bit-generator": 1, "rng-get-and-update-state": 0, "round-nearest-afz": 1,
    "round-nearest-even": 1, "rsqrt": 1, "scaled-dot": 4, "scan": None, "scatter": None, "select": 3,
    "select-and-scatter": 3, "send": 2, "send-done": 1, "set-dimension-size": 2, "shift-left": 2,
    "shift-right-arithmetic": 2, "shift-right-logical": 2, "shuffle": 1, "sign": 1, "sine": 1,
    "sinh": 1, "slice": 1, "sort": None, "sqrt": 1, "stochastic-convert": 2, "subtract": 2, "tan": 1,
    "tanh": 1, "topk": 1, "transpose": 1, "triangular-solve": 2, "tuple": None, "while": 1, "xor": 2,
}

# Attributes XLA's parser requires per opcode (it reports "attribute X is expected but not seen"). Found by
# deleting each attribute from the corpus modules and asking XLA's parser (see tests/hlo/make_corpus.py).
REQUIRED_ATTRIBUTES: Mapping[str, tuple[str, ...]] = {
    "all-gather": ("dimensions",), "all-gather-start": ("dimensions",),
    "all-reduce": ("to_apply",), "all-reduce-start": ("to_apply",),
    "reduce-scatter": ("dimensions", "to_apply"),
    "async-start": ("calls",), "call": ("to_apply",),
    "collective-permute": ("source_target_pairs",), "collective-permute-start": ("source_target_pairs",),
    "compare": ("direction",), "concatenate": ("dimensions",), "convolution": ("dim_labels",),
    "custom-call": ("custom_call_target",), "domain": ("domain",),
    "dynamic-slice": ("dynamic_slice_sizes",), "fft": ("fft_type", "fft_length"), "fusion": ("kind", "calls"),
    "gather": ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes"),
    "get-tuple-element": ("index",), "iota": ("iota_dimension",), "map": ("to_apply",), "pad": ("padding",),
    "reduce": ("dimensions", "to_apply"), "reduce-window": ("to_apply",), "rng-bit-generator": ("algorithm",),
    "scan": ("dimensions", "num_carries", "to_apply"),
    "scatter": ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                "index_vector_dim", "to_apply"),
    "select-and-scatter": ("select", "scatter"), "slice": ("slice",), "transpose": ("dimensions",),
    "while": ("condition", "body"),
}

_ASYNC_SUFFIXES = ("-start", "-update", "-done")


def is_known_opcode(opcode: str) -> bool:
    """Whether XLA's parser accepts `opcode`, including the async sugar `<op>-start/-update/-done`.

    Example:
      >>> is_known_opcode("custom-call-start"), is_known_opcode("dd")
      (True, False)
    """
    if opcode in OPCODES:
        return True
    for suffix in _ASYNC_SUFFIXES:
        if opcode.endswith(suffix) and opcode[: -len(suffix)] in OPCODES:
            return True
    return False


def fixed_arity(opcode: str) -> int | None:
    """The operand count XLA requires of `opcode`, or None when it varies (or the opcode takes a literal)."""
    if opcode in ("parameter", "constant"):
        return None
    return OPCODES.get(opcode)


def base_opcode(opcode: str) -> str:
    """The wrapped opcode of async sugar (`custom-call-start` -> `custom-call`); other opcodes unchanged."""
    if opcode in OPCODES:
        return opcode
    for suffix in _ASYNC_SUFFIXES:
        if opcode.endswith(suffix) and opcode[: -len(suffix)] in OPCODES:
            return opcode[: -len(suffix)]
    return opcode
