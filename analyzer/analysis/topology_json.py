"""A report's `Topology` in its JSON form (`topology_spec`), so a report rebuilt from JSON prices alternatives on
the topology it was analysed on, read from typed fields and never from the sentence `Report.topology` says in words.

The form holds what rebuilds it exactly: the hardware name, the physical slice (its name, each physical axis's
label, size, network and wraparound), how the mesh was placed on it (`origin`, `declared`), each mesh axis's
physical axes, and the device coordinates where the placement is the user's own (an explicit mapping or the
devices' coords). A mesh laid in order is laid again in order; one placed where jax.make_mesh places it is
placed again by jax's mesh utilities (analyzer.compile.placement), and kept only when it lands where the report
says each mesh axis lay. The mesh itself (names, sizes) is the report's `mesh`.

Example:
    >>> from analyzer.theory.topology import Topology
    >>> t = Topology.for_mesh("tpu-v5e", ("data", "model"), (2, 4), topology="v5e:2x4")
    >>> spec = topology_to_dict(t)
    >>> spec["slice"], spec["origin"], spec["placement"]
    ('v5e:2x4', 'in order', {'data': ['x'], 'model': ['y']})
    >>> topology_from_dict(spec, ("data", "model"), (2, 4)).coords == t.coords
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from analyzer.errors import AnalyzerError

if TYPE_CHECKING:
    from analyzer.theory.topology import Topology

__all__ = ["topology_to_dict", "topology_from_dict"]

_ORIGINS = ("in order", "mapping", "device coords", "jax.make_mesh")


def topology_to_dict(topo: Topology | None) -> dict[str, Any] | None:
    """The JSON form of `topo` (None for None): see the module docstring and docs/report-schema.json."""
    if topo is None:
        return None
    sl = topo.slice
    data: dict[str, Any] = {
        "hardware": topo.hardware.name,
        "slice": sl.name,
        "physical_axes": [{"label": label, "size": int(size), "network": network, "wraparound": bool(wraps)}
                          for label, size, network, wraps in zip(sl.axis_labels, sl.dims, sl.networks, sl.wraps)],
        "origin": topo.origin,
        "declared": bool(topo.declared),
        "placement": {name: list(p.physical_axes) for name, p in topo.placement().items()},
    }
    if topo.origin in ("mapping", "device coords"):  # the user's own placement: only its coords say it
        data["device_coords"] = [list(c) for c in topo.coords]
    return data


def topology_from_dict(data: Any, axis_names: Sequence[str], axis_sizes: Sequence[int]) -> Topology | None:
    """The `Topology` a report's `topology_spec` describes, for the mesh `axis_names` x `axis_sizes`; None when
    jax.make_mesh's placement, computed again here, is not the one the report was analysed on.

    Raises:
      AnalyzerError: the spec is malformed (naming the field and what is valid), or its hardware's spec here
        gives the slice other physical axes than the report's.
    """
    from analyzer.theory.hardware import load_hardware
    from analyzer.theory.topology import PhysicalSlice, Topology

    spec = _checked(data)
    hw = load_hardware(spec["hardware"])
    axes = spec["physical_axes"]
    sl = PhysicalSlice(hw, tuple(int(a["size"]) for a in axes), tuple(str(a["network"]) for a in axes),
                       tuple(bool(a["wraparound"]) for a in axes), tuple(str(a["label"]) for a in axes))
    if sl.name != spec["slice"]:
        raise AnalyzerError(f"report 'topology_spec': its physical axes make the slice {sl.name!r} on "
                            f"{hw.name}, not {spec['slice']!r} as it says")
    names, sizes = tuple(axis_names), tuple(int(s) for s in axis_sizes)
    origin, declared = spec["origin"], bool(spec["declared"])
    if origin == "in order":
        return Topology.for_mesh(hw, names, sizes, topology=sl, declared=declared)
    if origin == "jax.make_mesh":
        from analyzer.compile.placement import placed_topology

        placed = placed_topology(hw, sl, names, sizes, declared=declared)
        topo = placed[0] if placed is not None else None
        same = topo is not None and {n: list(p.physical_axes) for n, p in topo.placement().items()} == \
            spec["placement"]
        return topo if same else None
    coords = tuple(tuple(int(v) for v in c) for c in spec["device_coords"])
    if len(coords) != len(set(coords)) or len(coords) != sl.size:
        raise AnalyzerError(f"report 'topology_spec': 'device_coords' must give each of the {sl.size} chips of "
                            f"{sl.name} once, got {len(coords)} coordinates")
    return Topology(sl, names, sizes, coords, origin=origin, declared=declared)


def _checked(data: Any) -> Mapping[str, Any]:
    """`data` when it has every field `topology_from_dict` reads, of its type; else an AnalyzerError naming it."""
    def bad(field: str, valid: str) -> AnalyzerError:
        return AnalyzerError(f"report 'topology_spec': {field!r} must be {valid}")

    if not isinstance(data, Mapping):
        raise AnalyzerError(f"report 'topology_spec' must be an object, got {type(data).__name__}")
    for key in ("hardware", "slice", "origin"):
        if not isinstance(data.get(key), str):
            raise bad(key, "a string")
    if data["origin"] not in _ORIGINS:
        raise bad("origin", "one of " + ", ".join(repr(o) for o in _ORIGINS))
    if not isinstance(data.get("declared"), bool):
        raise bad("declared", "true or false")
    axes = data.get("physical_axes")
    if not isinstance(axes, list) or not axes or not all(
            isinstance(a, Mapping) and isinstance(a.get("label"), str) and isinstance(a.get("size"), int)
            and isinstance(a.get("network"), str) and isinstance(a.get("wraparound"), bool) for a in axes):
        raise bad("physical_axes", "a list of {label, size, network, wraparound} objects")
    placement = data.get("placement")
    if not isinstance(placement, Mapping) or not all(
            isinstance(v, list) and all(isinstance(p, str) for p in v) for v in placement.values()):
        raise bad("placement", "an object of mesh axis -> list of physical axis labels")
    if data["origin"] in ("mapping", "device coords"):
        coords = data.get("device_coords")
        if not isinstance(coords, list) or not all(
                isinstance(c, list) and all(isinstance(v, int) for v in c) for c in coords):
            raise bad("device_coords", "a list of integer coordinates, one per device")
    return data
