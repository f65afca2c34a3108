"""The HLO opcodes XLA's parser knows, with their operand counts.

Source: XLA's `HLO_OPCODE_LIST` (xla/hlo/ir/hlo_opcode.h): opcode spelling and arity; `None` is variadic.
XLA's parser rejects an unknown opcode and checks the operand count of fixed-arity opcodes, so
`analyzer.parse_hlo` does too. XLA also accepts async "syntax sugar": `<op>-start`, `<op>-update` and
`<op>-done` wrap any opcode in an async computation (e.g. `custom-call-start`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

__all__ = ["OPCODES", "REQUIRED_ATTRIBUTES", "ALLOWED_ATTRIBUTES", "COMMON_ATTRIBUTES", "is_known_opcode", "fixed_arity",
           "base_opcode", "allowed_attributes", "COLLECTIVE_KINDS", "COLLECTIVES", "ASYNC_COLLECTIVE_STARTS",
           "ASYNC_COLLECTIVE_DONES", "DOTS", "NOP", "RELABEL", "PASS_THROUGH", "ELEMENTWISE", "SLICING", "CALLERS",
           "ASYNC_COPIES", "VIEWS", "TO_APPLY_RUNS_CODE", "REDUCING_COLLECTIVES", "MOVING_COLLECTIVES", "LINK", "UNFUSED",
           "FUSED_INTO_CONSUMER", "IN_PLACE", "DEVICE_VARYING", "DATA_MOVEMENT", "NO_BUFFER",
           "OPCODE_CLASSES"]

OPCODES: Mapping[str, int | None] = {
    "abs": 1, "acos": 1, "acosh": 1, "add": 2, "add-dependency": 2, "after-all": None,
    "all-gather": None, "all-gather-done": 1, "all-gather-start": None,
    "all-reduce": None, "all-reduce-done": 1, "all-reduce-start": None, "all-to-all": None,
    "and": 2, "asin": 1, "asinh": 1, "async-done": 1, "async-start": None, "async-update": None,
    "atan2": 2, "atanh": 1, "batch-norm-grad": 5, "batch-norm-inference": 5,
    "batch-norm-training": 3, "bitcast": 1, "bitcast-convert": 1, "broadcast": 1, "call": None,
    "cbrt": 1, "ceil": 1, "cholesky": 1, "clamp": 3, "count-leading-zeros": 1,
    "collective-broadcast": None, "collective-permute": None, "collective-permute-done": 1,
    "collective-permute-start": None, "compare": 2, "complex": 2,
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
    "shift-right-arithmetic": 2, "shift-right-logical": 2, "sign": 1, "sine": 1,
    "sinh": 1, "slice": 1, "sort": None, "sqrt": 1, "stochastic-convert": 2, "subtract": 2, "tan": 1,
    "tanh": 1, "topk": 1, "transpose": 1, "triangular-solve": 2, "tuple": None, "while": 1, "xor": 2,
}

# ---------------------------------------------------------------------- opcode classes
# The classes of opcodes the analysis asks about, each defined here once (tests/hlo/test_opcodes.py checks that XLA's
# parser knows every member, `is_known_opcode`, so a misspelling such as `optimization-barrier` for XLA's `opt-barrier` cannot land).

# The logical collectives, as the report names them (XLA's collective opcodes; `-start`/`-done` are their async forms).
COLLECTIVE_KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute",
                    "collective-broadcast", "ragged-all-to-all")
COLLECTIVES = frozenset(COLLECTIVE_KINDS)
# Their async forms as XLA prints them: its own (`all-gather-start` ... `all-gather-done`) and its async sugar for the
# others (`all-to-all-start` wraps an all-to-all in an async computation). The generic `async-start`/`-done` pair
# wraps any op, collectives included.
ASYNC_COLLECTIVE_STARTS = frozenset(f"{k}-start" for k in COLLECTIVE_KINDS)
ASYNC_COLLECTIVE_DONES = frozenset(f"{k}-done" for k in COLLECTIVE_KINDS)
ASYNC_COPIES = frozenset({"copy-start", "copy-done"})
# Matrix multiplies: what the MXU / tensor cores run, and what `analyzer.analysis.dots` counts FLOPs of.
DOTS = frozenset({"dot", "convolution", "ragged-dot"})
# Instructions that move no data and run no kernel of their own, like XLA's `IsNopInstruction` (parameters, constants,
# tuples and their elements, bitcasts) plus the bookkeeping ops XLA emits no code for (tokens, control dependencies,
# the SPMD partitioner's ids, dynamic-dimension queries, domains and barriers).
NOP = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id",
                 "replica-id", "opt-barrier", "add-dependency", "domain", "get-dimension-size",
                 "set-dimension-size"})
# Ops that relabel an array without changing which elements it holds: views, layout changes and element casts.
# A value keeps its identity through them (which argument it is, which dot it feeds, how it is sharded).
RELABEL = frozenset({"bitcast", "reshape", "copy", "transpose", "convert", "bitcast-convert"})
# What passes a value through unchanged to its user: a relabelling, a tuple element, a barrier or an async copy.
PASS_THROUGH = RELABEL | frozenset({"get-tuple-element", "opt-barrier"}) | ASYNC_COPIES
# Element-wise ops: a slice of the output needs only the same slice of the inputs.
ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "exponential", "log", "tanh",
    "logistic", "sqrt", "rsqrt", "abs", "sign", "power", "select", "compare", "and", "or", "not", "xor",
    "clamp", "convert", "exponential-minus-one", "log-plus-one", "floor", "ceil", "round-nearest-afz",
    "round-nearest-even", "cosine", "sine", "erf", "cbrt", "is-finite", "remainder", "atan2", "tan",
})
# Ops that read part of their first operand: the slice's elements, not the whole array.
SLICING = frozenset({"slice", "dynamic-slice", "gather"})
# Pure views of a buffer: the same bytes under another shape (what a fusion's root writes is what their operand writes).
VIEWS = frozenset({"bitcast", "reshape"})
# Ops whose called computations run as code while the op runs (not fused, not a reducer).
CALLERS = frozenset({"while", "call", "conditional", "async-start"})
# Ops whose `to_apply=` computation is code run once per execution, not a scalar reducer.
TO_APPLY_RUNS_CODE = frozenset({"call", "custom-call", "async-start"})
# Collectives that reduce (sum) over the group, and those that only move or gather data.
REDUCING_COLLECTIVES = frozenset({"all-reduce", "reduce-scatter"})
MOVING_COLLECTIVES = frozenset({"all-gather", "all-to-all", "collective-permute"})
# Ops whose data moves on the interconnect: collectives, their async forms, and point-to-point send/recv.
LINK = COLLECTIVES | ASYNC_COLLECTIVE_STARTS | ASYNC_COLLECTIVE_DONES | frozenset(
    {"send", "recv", "send-done", "recv-done"})
# Ops XLA does not fuse with their neighbours: dots, control flow, calls, library calls, async and host transfers,
# and the big non-elementwise kernels (an unfused module's other ops run as parts of fusions XLA would form).
UNFUSED = DOTS | frozenset({
    "while", "call", "conditional", "fusion", "custom-call", "sort", "scatter", "async-start", "async-done",
    "async-update", "send", "recv", "send-done", "recv-done", "infeed", "outfeed", "rng-bit-generator", "cholesky",
    "triangular-solve", "fft"})
# Ops the TPU compiler fuses into their consumers: no buffer of their own (element-wise ops, relabellings, broadcasts,
# slices and the like; their operands' buffers stay live until the consumer reads through them).
FUSED_INTO_CONSUMER = ELEMENTWISE | RELABEL | frozenset({
    "broadcast", "iota", "constant", "slice", "pad", "concatenate", "reverse", "reduce-precision", "tuple",
    "get-tuple-element", "after-all", "add-dependency", "domain", "partition-id", "replica-id", "opt-barrier",
    "dynamic-slice"})
# Ops that may write their result over an operand's buffer of the same size that dies there.
IN_PLACE = frozenset({"while", "dynamic-update-slice", "scatter", "all-reduce", "collective-permute",
                      "select-and-scatter"})
# Instructions that make no buffer of their own: inputs, views and aliases of other buffers, the loop and call
# wrappers (their result is the loop state or the callee's root), what XLA always fuses into its consumers (a
# broadcast or iota is never materialised on its own) and async copies and transfers (their buffers are the operand's).
NO_BUFFER = NOP | VIEWS | ASYNC_COPIES | frozenset({"while", "call", "conditional", "broadcast", "iota", "send",
                                                     "send-done", "recv", "recv-done"})
# Ops whose result may differ from device to device on the same inputs (ids, random numbers, host and peer input,
# library calls): a value computed from one is not known to be the same on every device.
DEVICE_VARYING = frozenset({"partition-id", "replica-id", "rng", "rng-bit-generator", "rng-get-and-update-state",
                            "infeed", "recv", "recv-done", "custom-call"})
# Ops a fusion may hold and still only move data (no arithmetic): what a copy/transpose/concatenate fusion is made of.
DATA_MOVEMENT = PASS_THROUGH | frozenset({"parameter", "tuple", "slice", "dynamic-slice", "constant", "broadcast",
                                          "concatenate", "pad", "fusion"})

OPCODE_CLASSES: Mapping[str, frozenset[str]] = {
    "COLLECTIVES": COLLECTIVES, "ASYNC_COLLECTIVE_STARTS": ASYNC_COLLECTIVE_STARTS,
    "ASYNC_COLLECTIVE_DONES": ASYNC_COLLECTIVE_DONES, "ASYNC_COPIES": ASYNC_COPIES, "DOTS": DOTS, "NOP": NOP,
    "RELABEL": RELABEL, "PASS_THROUGH": PASS_THROUGH, "ELEMENTWISE": ELEMENTWISE, "SLICING": SLICING, "VIEWS": VIEWS,
    "CALLERS": CALLERS, "TO_APPLY_RUNS_CODE": TO_APPLY_RUNS_CODE, "REDUCING_COLLECTIVES": REDUCING_COLLECTIVES,
    "MOVING_COLLECTIVES": MOVING_COLLECTIVES, "LINK": LINK, "UNFUSED": UNFUSED,
    "FUSED_INTO_CONSUMER": FUSED_INTO_CONSUMER, "IN_PLACE": IN_PLACE, "DEVICE_VARYING": DEVICE_VARYING,
    "DATA_MOVEMENT": DATA_MOVEMENT, "NO_BUFFER": NO_BUFFER,
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

# Attributes XLA's parser takes on every instruction.
COMMON_ATTRIBUTES = frozenset({"backend_config", "control-predecessors", "frontend_attributes", "metadata", "origin",
                               "parameter_replication", "sharding", "statistics"})

# Attributes XLA's parser takes per opcode, beyond COMMON_ATTRIBUTES (it reports "unexpected attribute X" for any
# other). Measured, not transcribed: tests/hlo/make_attribute_table.py appends each candidate key to an
# instruction of each opcode and asks XLA's parser (jax 0.10's xla_client); keys seen on valid corpus modules
# are added. An opcode missing here is checked against COMMON_ATTRIBUTES only when it is async sugar.
ALLOWED_ATTRIBUTES: Mapping[str, tuple[str, ...]] = {
    "abs": (),
    "acos": ("result_accuracy",),
    "acosh": ("result_accuracy",),
    "add": (),
    "add-dependency": (),
    "after-all": (),
    "all-gather": ("channel_id", "constrain_layout", "dimensions", "replica_groups", "use_global_device_ids"),
    "all-gather-start": ("channel_id", "constrain_layout", "dimensions", "replica_groups", "use_global_device_ids"),
    "all-reduce": ("channel_id", "constrain_layout", "mode", "replica_groups", "to_apply", "use_global_device_ids"),
    "all-reduce-done": (),
    "all-reduce-start": ("channel_id", "constrain_layout", "mode", "replica_groups", "to_apply", "use_global_device_ids"),
    "all-to-all": ("channel_id", "constrain_layout", "dimensions", "replica_groups"),
    "and": (),
    "asin": ("result_accuracy",),
    "asinh": ("result_accuracy",),
    "async-done": ("async_execution_thread", "calls"),
    "async-start": ("async_execution_thread", "calls", "output_to_operand_aliasing"),
    "atan2": (),
    "atanh": ("result_accuracy",),
    "bitcast": (),
    "bitcast-convert": (),
    "broadcast": ("dimensions",),
    "call": ("is_composite", "to_apply"),
    "cbrt": ("result_accuracy",),
    "ceil": (),
    "cholesky": ("lower",),
    "clamp": (),
    "collective-broadcast": ("channel_id", "replica_groups"),
    "collective-permute": ("channel_id", "slice_sizes", "source_target_pairs"),
    "collective-permute-done": (),
    "collective-permute-start": ("channel_id", "slice_sizes", "source_target_pairs"),
    "compare": ("direction", "type"),
    "complex": (),
    "concatenate": ("dimensions",),
    "conditional": ("branch_computations", "false_computation", "true_computation"),
    "constant": (),
    "convert": (),
    "convolution": ("batch_group_count", "convolution_kind", "dim_labels", "feature_group_count", "operand_precision",
                    "sparsity_config", "window"),
    "copy": (),
    "copy-done": (),
    "copy-start": ("cross_program_prefetch_index",),
    "cosh": ("result_accuracy",),
    "cosine": ("result_accuracy",),
    "count-leading-zeros": (),
    "custom-call": ("api_version", "batch_group_count", "called_computations", "custom_call_has_side_effect", "custom_call_target", "dim_labels", "feature_group_count", "literal", "operand_layout_constraints", "operand_precision", "output_to_operand_aliasing", "padding_type", "schedule", "to_apply", "window"),
    "custom-call-done": ("async_execution_thread",),
    "custom-call-start": ("api_version", "async_execution_thread", "batch_group_count", "called_computations", "custom_call_has_side_effect", "custom_call_target", "dim_labels", "feature_group_count", "literal", "operand_layout_constraints", "operand_precision", "output_to_operand_aliasing", "padding_type", "schedule", "to_apply", "window"),
    "custom-call-update": ("async_execution_thread",),
    "divide": (),
    "domain": ("domain",),
    "dot": ("algorithm", "lhs_batch_dims", "lhs_contracting_dims", "operand_precision", "rhs_batch_dims", "rhs_contracting_dims"),
    "dynamic-slice": ("dynamic_slice_sizes",),
    "dynamic-update-slice": (),
    "erf": ("result_accuracy",),
    "exponential": ("result_accuracy",),
    "exponential-minus-one": ("result_accuracy",),
    "fft": ("fft_length", "fft_type"),
    "floor": (),
    "fusion": ("calls", "kind", "output_to_operand_aliasing"),
    "gather": ("collapsed_slice_dims", "index_vector_dim", "indices_are_sorted", "offset_dims", "operand_batching_dims", "slice_sizes", "start_index_map", "start_indices_batching_dims"),
    "get-dimension-size": ("dimensions",),
    "get-tuple-element": ("index",),
    "imag": (),
    "infeed": ("infeed_config",),
    "iota": ("iota_dimension",),
    "is-finite": (),
    "log": ("result_accuracy",),
    "log-plus-one": ("result_accuracy",),
    "logistic": ("result_accuracy",),
    "map": ("dimensions", "to_apply"),
    "maximum": (),
    "minimum": (),
    "mulhi": (),
    "multiply": (),
    "negate": (),
    "not": (),
    "opt-barrier": (),
    "or": (),
    "outfeed": ("outfeed_config", "outfeed_shape"),
    "pad": ("padding",),
    "parameter": (),
    "partition-id": (),
    "popcnt": (),
    "power": (),
    "ragged-all-to-all": ("channel_id", "dimensions", "replica_groups"),
    "real": (),
    "recv": ("channel_id", "is_host_transfer"),
    "recv-done": ("channel_id", "is_host_transfer"),
    "reduce": ("dimensions", "to_apply"),
    "reduce-precision": ("exponent_bits", "mantissa_bits"),
    "reduce-scatter": ("channel_id", "constrain_layout", "dimensions", "mode", "replica_groups", "to_apply", "use_global_device_ids"),
    "reduce-window": ("to_apply", "window"),
    "remainder": (),
    "replica-id": (),
    "reshape": (),
    "reverse": ("dimensions",),
    "rng-bit-generator": ("algorithm",),
    "round-nearest-afz": (),
    "round-nearest-even": (),
    "rsqrt": ("result_accuracy",),
    "scan": ("dimensions", "is_associative", "is_reverse", "num_carries", "to_apply"),
    "scatter": ("index_vector_dim", "indices_are_sorted", "input_batching_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "scatter_indices_batching_dims", "to_apply", "unique_indices", "update_window_dims"),
    "select": (),
    "select-and-scatter": ("scatter", "select", "window"),
    "send": ("channel_id", "is_host_transfer"),
    "send-done": ("channel_id", "is_host_transfer"),
    "shift-left": (),
    "shift-right-arithmetic": (),
    "shift-right-logical": (),
    "sign": (),
    "sine": ("result_accuracy",),
    "sinh": ("result_accuracy",),
    "slice": ("slice",),
    "sort": ("dimensions", "is_stable", "to_apply"),
    "sqrt": ("result_accuracy",),
    "subtract": (),
    "tan": ("result_accuracy",),
    "tanh": ("result_accuracy",),
    "topk": ("k", "largest"),
    "transpose": ("dimensions",),
    "triangular-solve": ("left_side", "lower", "transpose_a", "unit_diagonal"),
    "tuple": (),
    "while": ("body", "condition"),
    "xor": (),
}

_ASYNC_SUFFIXES = ("-start", "-update", "-done")
# Opcodes with async forms of their own: XLA's parser does not wrap them in async sugar (`send-start`,
# `all-reduce-update` are unknown opcodes to it).
_NOT_WRAPPED = frozenset({"all-gather", "all-reduce", "collective-permute", "copy", "send", "recv"})


def is_known_opcode(opcode: str) -> bool:
    """Whether XLA's parser accepts `opcode`, including the async sugar `<op>-start/-update/-done`.

    Example:
      >>> is_known_opcode("custom-call-start"), is_known_opcode("dd")
      (True, False)
    """
    if opcode in OPCODES:
        return True
    for suffix in _ASYNC_SUFFIXES:
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            return base in OPCODES and base not in _NOT_WRAPPED
    return False


def allowed_attributes(opcode: str) -> frozenset[str] | None:
    """The attribute keys XLA's parser takes on `opcode` (COMMON_ATTRIBUTES included), or None when not
    measured (then any key is taken).

    Example:
      >>> "dimensions" in allowed_attributes("transpose"), "dimensions" in allowed_attributes("negate")
      (True, False)
    """
    return _allowed(opcode)


def _allowed_uncached(opcode: str) -> frozenset[str] | None:
    own = ALLOWED_ATTRIBUTES.get(opcode)
    if own is not None:
        return COMMON_ATTRIBUTES | frozenset(own)
    if opcode in OPCODES:
        return None
    for suffix in _ASYNC_SUFFIXES:  # async sugar: the wrapped op's attributes on -start, the thread on all
        if opcode.endswith(suffix):
            base = ALLOWED_ATTRIBUTES.get(opcode[: -len(suffix)])
            if suffix != "-start":
                return COMMON_ATTRIBUTES | {"async_execution_thread"}
            return None if base is None else COMMON_ATTRIBUTES | frozenset(base) | {"async_execution_thread"}
    return None


_allowed = lru_cache(maxsize=1024)(_allowed_uncached)


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
