"""The user's mesh as the theory sees it: axis names, sizes and the device at each position.

One parser for meshes written as text (`data=4,model=2`, optionally `model=2:explicit`), used by every
command, config key and API that takes a mesh; `mesh_from_any` accepts the other forms (a jax `Mesh` or
`AbstractMesh`, a dict, a `MeshInfo`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from analyzer.errors import MeshError, valid_choices

__all__ = ["AXIS_TYPES", "MeshInfo", "parse_mesh", "parse_mesh_spec", "mesh_from_any"]

AXIS_TYPES = ("auto", "explicit", "manual")


@dataclass(frozen=True)
class MeshInfo:
    """The user's mesh: axis names and sizes (major to minor) and the device id at each mesh position."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    device_ids: tuple[int, ...]  # mesh.devices.flat device ids, row-major
    axis_types: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        n = 1
        for s in self.axis_sizes:
            n *= s
        return n

    @property
    def shape(self) -> dict[str, int]:
        return dict(zip(self.axis_names, self.axis_sizes))

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes))


_ITEM = re.compile(r"([A-Za-z_][\w.-]*)\s*=\s*(\d+)(?::(\w+))?")


def parse_mesh(text: str) -> dict[str, int | tuple[int, str]]:
    """Parse a mesh written as text (command line, config file).

    Args:
      text: comma-separated `name=size`, each optionally with `:auto`/`:explicit`/`:manual`, e.g.
        "data=4,model=2" or "X=2:explicit,Y=4". Sizes are positive integers; an axis may appear once.

    Returns:
      A dict of axis name -> size, or -> (size, axis type) where a type was written.

    Raises:
      MeshError: the text is not such a list, naming the part that could not be read.

    Example:
        >>> parse_mesh("data=4,model=2:explicit")
        {'data': 4, 'model': (2, 'explicit')}
    """
    if not isinstance(text, str) or not text.strip():
        raise MeshError(f"mesh {text!r} names no axes; write name=size pairs such as 'data=4,model=2'")
    result: dict[str, int | tuple[int, str]] = {}
    for part in (p.strip() for p in text.split(",")):
        m = _ITEM.fullmatch(part)
        if not m:
            raise MeshError(f"mesh {text!r}: cannot read {part!r}; write name=size pairs such as 'data=4,model=2' "
                            "(optionally 'model=2:explicit')")
        name, size, kind = m.group(1), int(m.group(2)), m.group(3)
        if name in result:
            raise MeshError(f"mesh {text!r}: axis {name!r} appears twice")
        if size < 1:
            raise MeshError(f"mesh {text!r}: axis {name!r} has size {size}; sizes are positive integers")
        if kind is not None and kind.lower() not in AXIS_TYPES:
            raise MeshError(f"mesh {text!r}: axis {name!r} has unknown axis type {kind!r}; "
                            + valid_choices(kind.lower(), AXIS_TYPES, what="axis types"))
        result[name] = (size, kind.lower()) if kind else size
    return result


def _size_of(axis: object, value: object) -> int:
    size = value[0] if isinstance(value, tuple) else value
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise MeshError(f"mesh axis {axis!r} has size {value!r}; sizes are positive integers")
    return size


def parse_mesh_spec(text: str) -> MeshInfo:
    """`"data=4,model=2"` -> `MeshInfo` with device ids 0..N-1 (the text form of `parse_mesh`).

    Example:
        >>> parse_mesh_spec("data=4,model=2")
        MeshInfo(axis_names=('data', 'model'), axis_sizes=(4, 2), device_ids=(0, 1, 2, 3, 4, 5, 6, 7), axis_types=())
    """
    return mesh_from_any(parse_mesh(text))  # type: ignore[return-value]


def mesh_from_any(mesh: object) -> MeshInfo | None:
    """A `MeshInfo` from a MeshInfo, a `jax.sharding.Mesh`/`AbstractMesh`, a dict `{"data": 4}` or a string
    `"data=4,model=2"`; None stays None.

    Raises:
      MeshError: anything else, with what would be valid.
    """
    if mesh is None or isinstance(mesh, MeshInfo):
        return mesh
    if isinstance(mesh, str):
        return parse_mesh_spec(mesh)
    if isinstance(mesh, Mapping):
        names = tuple(str(k) for k in mesh)
        sizes = tuple(_size_of(k, v) for k, v in mesh.items())
        if not names:
            raise MeshError("mesh {} names no axes; write e.g. {'data': 4, 'model': 2}")
        types = tuple(v[1] for v in mesh.values() if isinstance(v, tuple))
        info = MeshInfo(names, sizes, ())
        return MeshInfo(names, sizes, tuple(range(info.size)), types if len(types) == len(names) else ())
    shape = getattr(mesh, "shape", None)
    names = getattr(mesh, "axis_names", None)
    if shape is not None and names is not None:
        sizes = tuple(int(shape[a]) for a in names)
        devices = getattr(mesh, "devices", None)
        try:
            ids = tuple(int(d.id) for d in devices.flat)  # type: ignore[union-attr]
        except AttributeError:
            ids = tuple(range(MeshInfo((), sizes, ()).size))
        types = tuple(str(t).split(".")[-1].lower() for t in getattr(mesh, "axis_types", ()) or ())
        return MeshInfo(tuple(str(a) for a in names), sizes, ids, types)
    raise MeshError(f"mesh {mesh!r} is not a mesh; give a jax.sharding.Mesh, a dict like "
                    "{'data': 4, 'model': 2}, or a string 'data=4,model=2'")
