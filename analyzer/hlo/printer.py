"""IR -> HLO text that XLA's parser accepts and that `parse_hlo` reads back to an equal module.

The output follows XLA's `HloModule::ToString()` layout: the header with its attributes, the stack-frame
tables (rebuilt from the resolved frames), then each computation with its signature and instructions.
Operands are printed by name only, attributes verbatim.
"""

from __future__ import annotations

from analyzer.hlo.ir import Computation, Frame, HloModule, Instruction, Layout, Shape

__all__ = ["print_hlo", "format_shape", "format_layout", "format_instruction", "format_computation"]


def format_layout(layout: Layout) -> str:
    """`Layout((1, 0), ((8, 128),), 1)` -> `{1,0:T(8,128)S(1)}`.

    Example:
      >>> format_layout(Layout((1, 0), ((8, 128), (2, 1)), 1))
      '{1,0:T(8,128)(2,1)S(1)}'
    """
    text = ",".join(str(d) for d in layout.minor_to_major)
    extra = layout.extra
    lead = ""
    if extra.startswith("D("):  # dim level types come before the tiles
        end = extra.index(")") + 1
        lead, extra = extra[:end], extra[end:]
    tiles = ""
    if layout.tiles:
        tiles = "T" + "".join("(" + ",".join("*" if t == -1 else str(t) for t in tile) + ")" for tile in layout.tiles)
    if layout.memory_space is not None and "S(" not in extra:
        extra += f"S({layout.memory_space})"
    extras = lead + tiles + extra
    return "{" + text + (":" + extras if extras else "") + "}"


def format_shape(shape: Shape) -> str:
    """The HLO spelling of `shape` with its layout: `bf16[8,<=16]{1,0}`, `(f32[], s32[2]{0})`, `token[]`.

    Example:
      >>> format_shape(Shape("f32", (2, 3), (), Layout((1, 0))))
      'f32[2,3]{1,0}'
    """
    if shape.is_tuple:
        return "(" + ", ".join(format_shape(s) for s in shape.tuple_shapes) + ")"
    if shape.is_buffer:
        return f"b({format_shape(shape.tuple_shapes[0])})"
    dynamic = shape.dynamic or (False,) * len(shape.dims)
    dims = ",".join("?" if d < 0 else (f"<={d}" if dyn else str(d)) for d, dyn in zip(shape.dims, dynamic))
    text = f"{shape.element_type}[{dims}]"
    if shape.layout is not None:
        text += format_layout(shape.layout)
    return text


def format_instruction(inst: Instruction) -> str:
    """One instruction line (without indentation): `ROOT %add = f32[2]{0} add(%a, %b), metadata={...}`."""
    if inst.opcode == "parameter":
        args = str(inst.parameter_number)
    elif inst.opcode == "constant":
        args = inst.literal or ""
    else:
        args = ", ".join("%" + o.name for o in inst.operands)
    text = f"%{inst.name} = {format_shape(inst.shape)} {inst.opcode}({args})"
    for a in inst.attributes:
        text += f", {a.key}={a.raw}"
    return ("ROOT " if inst.is_root else "") + text


def format_computation(comp: Computation) -> str:
    """A computation with its signature, instructions and trailing attributes."""
    params = ", ".join(f"{name}: {format_shape(shape)}" for name, shape in comp.parameter_shapes)
    head = ("ENTRY " if comp.is_entry else "") + f"%{comp.name} ({params})"
    if comp.result_shape is not None:
        head += f" -> {format_shape(comp.result_shape)}"
    lines = [head + " {"]
    lines.extend("  " + format_instruction(i) for i in comp.instructions)
    tail = "}" + "".join(f", {a.key}={a.raw}" for a in comp.attributes)
    lines.append(tail)
    return "\n".join(lines)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _format_tables(frames: dict[int, Frame]) -> str:
    """FileNames / FunctionNames / FileLocations / StackFrames rebuilt from resolved frames (ids kept)."""
    files: dict[str, int] = {}
    funcs: dict[str, int] = {}
    locs: dict[tuple, int] = {}
    rows: list[str] = []
    for fid in sorted(frames):
        f = frames[fid]
        fi = files.setdefault(f.file, len(files) + 1)
        fn = funcs.setdefault(f.function, len(funcs) + 1)
        key = (fi, fn, f.line, f.end_line, f.column, f.end_column)
        li = locs.setdefault(key, len(locs) + 1)
        parent = f.parent + 1 if f.parent is not None else 1  # XLA prints the parent one higher
        rows.append(f"{fid} {{file_location_id={li} parent_frame_id={parent}}}")
    out = ["FileNames"] + [f"{i} {_quote(s)}" for s, i in files.items()]
    out += ["", "FunctionNames"] + [f"{i} {_quote(s)}" for s, i in funcs.items()]
    out += ["", "FileLocations"]
    for (fi, fn, line, end_line, col, end_col), i in locs.items():
        fields = f"file_name_id={fi} function_name_id={fn} line={line}"
        if end_line is not None:
            fields += f" end_line={end_line}"
        fields += f" column={col}"
        if end_col is not None:
            fields += f" end_column={end_col}"
        out.append(f"{i} {{{fields}}}")
    out += ["", "StackFrames"] + rows
    return "\n".join(out)


def print_hlo(module: HloModule) -> str:
    """The module as HLO text.

    Args:
      module: a parsed (or built) `HloModule`.

    Returns:
      Text that XLA's parser accepts and `analyzer.parse_hlo` reads back to a module equal to `module`.

    Example:
      >>> from analyzer.hlo.parser import parse_hlo
      >>> m = parse_hlo("HloModule m\\nENTRY e {\\n  ROOT p = f32[2] parameter(0)\\n}\\n")
      >>> parse_hlo(print_hlo(m)) == m
      True
    """
    head = f"HloModule {module.name}" + "".join(f", {k}={v}" for k, v in module.attributes.items())
    parts = [head]
    if module.frames:
        parts.append(_format_tables(dict(module.frames)))
    parts.extend(format_computation(c) for c in module.computations)
    return "\n\n".join(parts) + "\n"
