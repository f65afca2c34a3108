"""Hardware specs: what a chip computes, holds and moves per second, read from `hardware/*.toml`.

One TOML file per system ships in the package (`analyzer/_data/hardware/`, a link to the repo's
`hardware/` folder); every number in it names the section of "How to Scale Your Model" it comes from.
A user can load their own file by path. Loading checks the schema: an unknown or missing key, or a
value of the wrong type, is a `HardwareError` that names the file, the key and the valid keys.

    >>> from analyzer.theory.hardware import load_hardware
    >>> hw = load_hardware("tpu-v5e")
    >>> hw.ici.link_bandwidth_bidi, hw.flops_per_second("bf16")
    (90000000000.0, 197000000000000.0)

Units: bytes, bytes per second (one direction unless a name says `bidi`), FLOPs per second, seconds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.errors import ConfigError, HardwareError, load_toml, valid_choices
# The `[flops]` key for a dtype name (`"s8"` -> `"int8"`, `"f8e4m3fn"` -> `"fp8"`, `"bfloat16"` -> `"bf16"`).
from analyzer.theory.dtypes import flops_key as canonical_dtype

__all__ = [
    "HardwareSpec",
    "IciSpec",
    "WraparoundRule",
    "MxuSpec",
    "NvlinkSpec",
    "ScaleOutLevel",
    "ScaleOutSpec",
    "load_hardware",
    "list_hardware",
    "hardware_dir",
    "canonical_dtype",
]


@dataclass(frozen=True)
class WraparoundRule:
    """When a TPU slice's ICI axes close into rings (tpus.md, "ICI topology").

    Attributes:
      rule: "full-axis" (v5e/v6e: an axis wraps only when it spans the full pod axis of `size` chips) or
        "cube" (v4p/v5p: a slice whose every dim is a multiple of the `cube` dims wraps on every axis).
      size: for "full-axis", the axis length that wraps (16 on v5e/v6e).
      cube: for "cube", the building block (4, 4, 4).
    """

    rule: str
    size: int = 0
    cube: tuple[int, ...] = ()

    def wraps(self, dims: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice of shape `dims` have wraparound links.

        Example:
          >>> WraparoundRule("full-axis", size=16).wraps((8, 16))
          (False, True)
          >>> WraparoundRule("cube", cube=(4, 4, 4)).wraps((4, 4, 8))
          (True, True, True)
        """
        if self.rule == "full-axis":
            return tuple(d == self.size for d in dims)
        full = len(dims) == len(self.cube) and all(d % c == 0 for d, c in zip(dims, self.cube))
        # An axis of 1 or 2 chips gains nothing from a wrap link (its neighbour is already adjacent).
        return tuple(full and d > 2 for d in dims)

    def describe(self) -> str:
        if self.rule == "full-axis":
            return f"wraparound only on axes of {self.size}"
        return f"wraparound on multiples of full {'x'.join(map(str, self.cube))} cubes"


@dataclass(frozen=True)
class IciSpec:
    """A TPU's inter-chip interconnect: a 2D or 3D torus of point-to-point links."""

    link_bandwidth_one_way: float
    link_bandwidth_bidi: float
    links_per_axis: int
    hop_latency: float
    max_topology: tuple[int, ...]
    host_topology: tuple[int, ...]
    wraparound: WraparoundRule

    @property
    def rank(self) -> int:
        """2 for a 2D torus (v3, v5e, v6e), 3 for a 3D torus (v4p, v5p, 7x)."""
        return len(self.max_topology)

    @property
    def latency_threshold_bytes(self) -> float:
        """Per-hop chunks below this many bytes are latency-bound: one-way link bandwidth x hop latency.

        sharding.md, "A note on ICI latency": 4.5e10 * 1e-6 = 45kB on v5e.
        """
        return self.link_bandwidth_one_way * self.hop_latency


@dataclass(frozen=True)
class MxuSpec:
    """A TPU TensorCore's matrix unit, as far as pricing one matmul needs it (analyzer.theory.matmul).

    Attributes:
      tile: the systolic array's (rows, columns): a dot's contracting dim and the stationary operand's free dim
        are padded to these (128x128 on v2-v5p, 256x256 on v6e and 7x).
      sublanes: the rows of one streamed operand push (8: `bf16[8,128] @ bf16[128,128]`), what the streamed
        operand's free dim is padded to.
      vmem_bytes: on-chip vector memory per TensorCore, the most a matmul's blocks can hold.
      cores_per_chip: TensorCores a chip's FLOPs are split over (2 on v4/v5p megacore and 7x).
    """

    tile: tuple[int, int]
    sublanes: int
    vmem_bytes: float
    cores_per_chip: int = 1


@dataclass(frozen=True)
class NvlinkSpec:
    """A GPU node's NVLink domain: every GPU reaches every other through NVSwitches."""

    gpu_egress: float  # bytes/s each GPU can send (and, full duplex, receive) over NVLink
    link_bandwidth: float
    links_per_gpu: int
    domain_size: int
    sharp: bool


@dataclass(frozen=True)
class ScaleOutLevel:
    """One level of the fat tree above the NVLink domain: `degree` children, each with an uplink of
    `link_bandwidth` bytes/s (gpus.md, "precise tree form")."""

    name: str
    degree: int
    link_bandwidth: float


@dataclass(frozen=True)
class ScaleOutSpec:
    """The network between NVLink domains (InfiniBand in the book's DGX SuperPod)."""

    node_egress: float
    sharp: bool
    levels: tuple[ScaleOutLevel, ...]


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator system, as a spec file describes it.

    Attributes:
      name: the spec's name (`tpu-v5e`, `h100`...).
      kind: "tpu" or "gpu".
      description: one line for people.
      topology_prefix: the prefix of topology strings (`v5e` in `v5e:8x4`, `h100` in `h100:4x8`).
      device_kind: what jax reports as `Device.device_kind` for this chip ("TPU v5 lite"), or "" when the
        spec does not say; jax's mesh utilities choose device orders by it (analyzer.compile.placement).
      flops: FLOPs/s per chip as `(dtype, rate)` pairs (a tuple keeps the spec hashable).
      hbm_bytes, hbm_bandwidth: HBM capacity and bandwidth per chip (the spec sheet's).
      hbm_measured_copy: `(bytes, seconds)` of a copy measured on the chip (`[hbm.measured_copy]`: an array of
        `bytes` read and written again in `seconds` of device time), or None; when given, the step model prices HBM
        traffic at the rate it shows (`hbm_rate`), not at the spec sheet's bandwidth (docs/step.md).
      ici: the TPU torus, or None for GPUs.
      dcn_bandwidth_per_chip: TPU data-center network egress per chip, or None.
      pcie_bandwidth_per_chip: host link per chip and direction, bytes/s (what host-offload copies are priced on,
        analyzer.analysis.offload), or None.
      nvlink, scale_out: the GPU networks, or None.
      mxu: the TPU matrix unit's tile and VMEM (`[mxu]`), or None (then matmuls are priced at peak).
      path: the file the spec was read from.
    """

    name: str
    kind: str
    description: str
    topology_prefix: str
    flops: tuple[tuple[str, float], ...]
    hbm_bytes: float
    hbm_bandwidth: float
    ici: IciSpec | None = None
    dcn_bandwidth_per_chip: float | None = None
    pcie_bandwidth_per_chip: float | None = None
    nvlink: NvlinkSpec | None = None
    scale_out: ScaleOutSpec | None = None
    path: str = ""
    device_kind: str = ""
    mxu: MxuSpec | None = None
    hbm_measured_copy: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("tpu", "gpu"):
            raise ValueError(f"kind must be 'tpu' or 'gpu', got {self.kind!r}")
        if self.kind == "tpu" and self.ici is None:
            raise ValueError("a TPU spec needs an [ici] table")
        if self.kind == "gpu" and self.nvlink is None:
            raise ValueError("a GPU spec needs an [nvlink] table")

    @property
    def flops_table(self) -> dict[str, float]:
        """FLOPs/s per chip by dtype key, as a fresh dict."""
        return dict(self.flops)

    def flops_per_second(self, dtype: str = "bf16", *, fallback: bool = True) -> float:
        """Peak FLOPs/s per chip for matmuls in `dtype`.

        Args:
          dtype: an HLO element type or a `[flops]` key (`bf16`, `f32`, `s8`, `f8e4m3fn`...).
          fallback: when the spec gives no rate for `dtype` (the book lists bf16 and int8 only for TPUs),
            use the bf16 rate, an optimistic bound. With False, raise instead.

        Raises:
          HardwareError: no rate for `dtype` and `fallback` is False.

        Example:
          >>> load_hardware("h100").flops_per_second("f8e4m3fn")
          2000000000000000.0
        """
        table = self.flops_table
        key = canonical_dtype(dtype)
        if key in table:
            return table[key]
        if fallback and "bf16" in table:
            return table["bf16"]
        raise HardwareError(f"{self.name}: no FLOPs/s for dtype {dtype!r}; "
                            f"{valid_choices(key, table, what='dtypes')}")

    @property
    def peak_flops(self) -> float:
        """The bf16 rate, the book's C."""
        return self.flops_per_second("bf16")

    @property
    def hbm_rate(self) -> float:
        """Bytes/s of HBM traffic as the step model prices it: the measured copy's rate (`2 x bytes / seconds`: each
        byte read once and written once) when the spec has `[hbm.measured_copy]`, else the spec's bandwidth.

        Example:
          >>> load_hardware("tpu-v5p").hbm_rate == load_hardware("tpu-v5p").hbm_bandwidth   # no measurement
          True
        """
        if self.hbm_measured_copy is None:
            return self.hbm_bandwidth
        nbytes, seconds = self.hbm_measured_copy
        return 2.0 * nbytes / seconds

    @property
    def hop_latency(self) -> float | None:
        """Seconds per ICI hop (TPUs); None for GPUs, where the book gives no latency figure."""
        return self.ici.hop_latency if self.ici is not None else None

    def summary(self) -> dict[str, Any]:
        """A flat, JSON-ready dict of every number (for `hlo-analyzer hardware show --json`)."""
        out: dict[str, Any] = {
            "name": self.name, "kind": self.kind, "description": self.description,
            "topology_prefix": self.topology_prefix, "device_kind": self.device_kind, "flops": self.flops_table,
            "hbm_bytes": self.hbm_bytes, "hbm_bandwidth": self.hbm_bandwidth, "hbm_rate": self.hbm_rate,
            "dcn_bandwidth_per_chip": self.dcn_bandwidth_per_chip,
            "pcie_bandwidth_per_chip": self.pcie_bandwidth_per_chip, "path": self.path,
        }
        if self.ici is not None:
            i = self.ici
            out["ici"] = {
                "link_bandwidth_one_way": i.link_bandwidth_one_way, "link_bandwidth_bidi": i.link_bandwidth_bidi,
                "links_per_axis": i.links_per_axis, "hop_latency": i.hop_latency,
                "max_topology": list(i.max_topology), "host_topology": list(i.host_topology),
                "wraparound": i.wraparound.describe(),
                "latency_threshold_bytes": i.latency_threshold_bytes,
            }
        if self.nvlink is not None:
            n = self.nvlink
            out["nvlink"] = {"gpu_egress": n.gpu_egress, "link_bandwidth": n.link_bandwidth,
                             "links_per_gpu": n.links_per_gpu, "domain_size": n.domain_size, "sharp": n.sharp}
        if self.scale_out is not None:
            s = self.scale_out
            out["scale_out"] = {"node_egress": s.node_egress, "sharp": s.sharp,
                                "levels": [{"name": lv.name, "degree": lv.degree,
                                            "link_bandwidth": lv.link_bandwidth} for lv in s.levels]}
        if self.mxu is not None:
            m = self.mxu
            out["mxu"] = {"tile": list(m.tile), "sublanes": m.sublanes, "vmem_bytes": m.vmem_bytes,
                          "cores_per_chip": m.cores_per_chip}
        return out


# ------------------------------------------------------------------------------------------------ schema
# section -> key -> (type, required). Top-level keys live under "". Types: float accepts ints.
_NUM = (int, float)
_SCHEMA: Mapping[str, Mapping[str, tuple[Any, bool]]] = {
    "": {"name": (str, True), "kind": (str, True), "description": (str, False),
         "topology_prefix": (str, True), "device_kind": (str, False), "flops": (dict, True), "hbm": (dict, True), "ici": (dict, False),
         "dcn": (dict, False), "pcie": (dict, False), "nvlink": (dict, False), "scale_out": (dict, False),
         "mxu": (dict, False)},
    "mxu": {"tile": (list, True), "sublanes": (int, True), "vmem_bytes": (_NUM, True),
            "cores_per_chip": (int, False)},
    "hbm": {"bytes": (_NUM, True), "bandwidth": (_NUM, True), "measured_copy": (dict, False)},
    "hbm.measured_copy": {"bytes": (_NUM, True), "seconds": (_NUM, True)},
    "ici": {"link_bandwidth_one_way": (_NUM, True), "link_bandwidth_bidi": (_NUM, True),
            "links_per_axis": (int, True), "hop_latency": (_NUM, True), "max_topology": (list, True),
            "host_topology": (list, False), "wraparound": (dict, True)},
    "ici.wraparound": {"rule": (str, True), "size": (int, False), "cube": (list, False)},
    "dcn": {"bandwidth_per_chip": (_NUM, True)},
    "pcie": {"bandwidth_per_chip": (_NUM, True)},
    "nvlink": {"gpu_egress": (_NUM, True), "link_bandwidth": (_NUM, True), "links_per_gpu": (int, True),
               "domain_size": (int, True), "sharp": (bool, True)},
    "scale_out": {"node_egress": (_NUM, True), "sharp": (bool, True), "levels": (list, True)},
    "scale_out.levels": {"name": (str, True), "degree": (int, True), "link_bandwidth": (_NUM, True)},
}
_FLOPS_KEYS = ("bf16", "f16", "f32", "f64", "int8", "int4", "fp8", "fp4")
_TYPE_NAMES = {str: "a string", dict: "a table", list: "an array", int: "an integer", bool: "true or false",
               _NUM: "a number"}


def _check_table(path: str, section: str, table: Any) -> dict[str, Any]:
    """Check one table against `_SCHEMA[section]`: no unknown keys, required keys present, right types."""
    label = f"[{section}]" if section else "the top level"
    if not isinstance(table, dict):
        raise HardwareError(f"{path}: {label} must be a table, got {type(table).__name__}")
    schema = _SCHEMA[section]
    for key, value in table.items():
        if key not in schema:
            raise HardwareError(f"{path}: unknown key {key!r} in {label}; "
                                f"{valid_choices(key, schema, what='keys')}")
        typ, _ = schema[key]
        ok = isinstance(value, typ) and not (typ in (int, _NUM) and isinstance(value, bool))
        if not ok:
            raise HardwareError(f"{path}: key {key!r} in {label} must be {_TYPE_NAMES[typ]}, got {value!r}")
        if typ is _NUM and _number_problem(value, positive=True):  # NaN, inf and denormals too, not only <= 0
            raise HardwareError(f"{path}: key {key!r} in {label} must be a finite positive number, got {value!r} "
                                f"({_number_problem(value, positive=True)})")
        if typ is int and value <= 0:  # every integer of the schema counts links, chips or levels
            raise HardwareError(f"{path}: key {key!r} in {label} must be a positive integer (a count), "
                                f"got {value!r}")
    for key, (_, required) in schema.items():
        if required and key not in table:
            raise HardwareError(f"{path}: missing key {key!r} in {label}; "
                                f"required keys: {', '.join(k for k, (_, r) in schema.items() if r)}")
    return table


def _number_problem(value: Any, *, positive: bool = False) -> str | None:
    from analyzer.numeric import number_problem

    return number_problem(value, positive=positive)


def _int_list(path: str, where: str, value: list) -> tuple[int, ...]:
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise HardwareError(f"{path}: {where} must be a list of positive integers, got {value!r}")
    return tuple(value)


def _measured_copy(path: str, hbm: dict[str, Any]) -> tuple[float, float] | None:
    if "measured_copy" not in hbm:
        return None
    t = _check_table(path, "hbm.measured_copy", hbm["measured_copy"])
    return float(t["bytes"]), float(t["seconds"])


def spec_from_dict(data: Mapping[str, Any], *, path: str = "<dict>") -> HardwareSpec:
    """Build a `HardwareSpec` from parsed TOML, checking the schema.

    Raises:
      HardwareError: naming `path`, the bad or missing key and the valid keys.
    """
    top = _check_table(path, "", dict(data))
    kind = top["kind"]
    if kind not in ("tpu", "gpu"):
        raise HardwareError(f"{path}: key 'kind' must be 'tpu' or 'gpu', got {kind!r}")
    flops = top["flops"]
    if not flops:
        raise HardwareError(f"{path}: [flops] is empty; give at least bf16")
    for key, value in flops.items():
        if key not in _FLOPS_KEYS:
            raise HardwareError(f"{path}: unknown dtype {key!r} in [flops]; "
                                f"{valid_choices(key, _FLOPS_KEYS, what='keys')}")
        if not isinstance(value, _NUM) or isinstance(value, bool) or _number_problem(value, positive=True):
            raise HardwareError(f"{path}: key {key!r} in [flops] must be a finite positive number, got {value!r}")
    hbm = _check_table(path, "hbm", top["hbm"])
    ici = None
    if "ici" in top:
        t = _check_table(path, "ici", top["ici"])
        w = _check_table(path, "ici.wraparound", t["wraparound"])
        if w["rule"] == "full-axis":
            if "size" not in w:
                raise HardwareError(f"{path}: missing key 'size' in [ici.wraparound] for rule 'full-axis'")
            rule = WraparoundRule("full-axis", size=w["size"])
        elif w["rule"] == "cube":
            if "cube" not in w:
                raise HardwareError(f"{path}: missing key 'cube' in [ici.wraparound] for rule 'cube'")
            rule = WraparoundRule("cube", cube=_int_list(path, "[ici.wraparound] cube", w["cube"]))
        else:
            raise HardwareError(f"{path}: key 'rule' in [ici.wraparound] must be 'full-axis' or 'cube', "
                                f"got {w['rule']!r}")
        ici = IciSpec(
            link_bandwidth_one_way=float(t["link_bandwidth_one_way"]),
            link_bandwidth_bidi=float(t["link_bandwidth_bidi"]),
            links_per_axis=t["links_per_axis"], hop_latency=float(t["hop_latency"]),
            max_topology=_int_list(path, "[ici] max_topology", t["max_topology"]),
            host_topology=_int_list(path, "[ici] host_topology", t.get("host_topology", [1])),
            wraparound=rule,
        )
    nvlink = None
    if "nvlink" in top:
        t = _check_table(path, "nvlink", top["nvlink"])
        nvlink = NvlinkSpec(gpu_egress=float(t["gpu_egress"]), link_bandwidth=float(t["link_bandwidth"]),
                            links_per_gpu=t["links_per_gpu"], domain_size=t["domain_size"], sharp=t["sharp"])
    scale_out = None
    if "scale_out" in top:
        t = _check_table(path, "scale_out", top["scale_out"])
        levels = tuple(
            ScaleOutLevel(name=lv["name"], degree=lv["degree"], link_bandwidth=float(lv["link_bandwidth"]))
            for lv in (_check_table(path, "scale_out.levels", lv) for lv in t["levels"])
        )
        scale_out = ScaleOutSpec(node_egress=float(t["node_egress"]), sharp=t["sharp"], levels=levels)
    if kind == "tpu" and ici is None:
        raise HardwareError(f"{path}: missing table [ici], required for kind 'tpu'")
    if kind == "gpu" and nvlink is None:
        raise HardwareError(f"{path}: missing table [nvlink], required for kind 'gpu'")
    mxu = None
    if "mxu" in top:
        t = _check_table(path, "mxu", top["mxu"])
        tile = _int_list(path, "[mxu] tile", t["tile"])
        if len(tile) != 2:
            raise HardwareError(f"{path}: [mxu] tile must be [rows, columns], got {t['tile']!r}")
        mxu = MxuSpec(tile=(tile[0], tile[1]), sublanes=t["sublanes"], vmem_bytes=float(t["vmem_bytes"]),
                      cores_per_chip=t.get("cores_per_chip", 1))
    for section, allowed in (("ici", "tpu"), ("dcn", "tpu"), ("nvlink", "gpu"), ("scale_out", "gpu"),
                             ("mxu", "tpu")):
        if section in top and kind != allowed:
            raise HardwareError(f"{path}: table [{section}] is only valid for kind {allowed!r}, not {kind!r}")
    return HardwareSpec(
        name=top["name"], kind=kind, description=top.get("description", ""),
        topology_prefix=top["topology_prefix"], device_kind=top.get("device_kind", ""),
        flops=tuple((k, float(v)) for k, v in flops.items()),
        hbm_bytes=float(hbm["bytes"]), hbm_bandwidth=float(hbm["bandwidth"]), ici=ici,
        hbm_measured_copy=_measured_copy(path, hbm),
        dcn_bandwidth_per_chip=float(_check_table(path, "dcn", top["dcn"])["bandwidth_per_chip"])
        if "dcn" in top else None,
        pcie_bandwidth_per_chip=float(_check_table(path, "pcie", top["pcie"])["bandwidth_per_chip"])
        if "pcie" in top else None,
        nvlink=nvlink, scale_out=scale_out, path=path, mxu=mxu,
    )


# ------------------------------------------------------------------------------------------------ loading
def hardware_dir():
    """The packaged spec folder (an `importlib.resources` Traversable)."""
    from importlib.resources import files

    return files("analyzer") / "_data" / "hardware"


def list_hardware() -> list[str]:
    """Names of the packaged hardware specs, sorted.

    Example:
      >>> "tpu-v5e" in list_hardware()
      True
    """
    return sorted(p.name[: -len(".toml")] for p in hardware_dir().iterdir() if p.name.endswith(".toml"))


def _read(path_label: str, text: str) -> HardwareSpec:
    try:
        data = load_toml(text, path=path_label)
    except ConfigError as e:
        raise HardwareError(str(e)) from None
    try:
        return spec_from_dict(data, path=path_label)
    except HardwareError as e:
        raise _placed(e, path_label, text) from None


def _placed(error: HardwareError, path_label: str, text: str) -> HardwareError:
    """The schema error at its line in the spec file: `path:line: error: message` and the source line.

    The schema's messages name the key and its table (`key 'links_per_axis' in [ici]`, `unknown dtype 'bf8' in
    [flops]`, `[ici] max_topology must ...`) or only the table (`missing key ... in [ici]`, `[flops] is
    empty`): the key's line, else the table's header.
    """
    import re

    from analyzer.errors import find_key_line, find_table_line, toml_line

    message = str(error)
    body = message[len(path_label) + 2:] if message.startswith(f"{path_label}: ") else message
    line = None
    named = re.search(r"(?:key|dtype) '([^']+)' in (?:\[([^\]]+)\]|the top level)", body)
    listed = re.match(r"\[([^\]]+)\] (\w+) must", body)
    if named and not body.startswith("missing"):
        line = find_key_line(text, named.group(1), named.group(2) or "")
    elif listed:
        line = find_key_line(text, listed.group(2), listed.group(1))
    else:
        table = re.search(r"\[([^\]]+)\]", body)
        line = find_table_line(text, table.group(1)) if table else None
    if line is None:
        return error
    source = toml_line(text, line)
    return HardwareError(f"{path_label}:{line}: error: {body}" + (f"\n{source}" if source is not None else ""))


def load_hardware(name_or_path: str | Path | HardwareSpec | Mapping[str, Any]) -> HardwareSpec:
    """Load a hardware spec by packaged name (`"tpu-v5e"`, `"h100"`) or from a TOML file path.

    Args:
      name_or_path: a name from `list_hardware()`, a path to a `.toml` spec, a `HardwareSpec` (returned
        as is, so callers can accept either), or a dict in the spec files' schema (checked like a file).

    Returns:
      The checked `HardwareSpec`.

    Raises:
      HardwareError: an unknown name (listing the valid ones), a missing file, or a spec that breaks
        the schema (naming the file, the key and the valid keys).

    Example:
      >>> load_hardware("tpu-v5p").ici.link_bandwidth_bidi
      180000000000.0
    """
    if isinstance(name_or_path, HardwareSpec):
        return name_or_path
    if isinstance(name_or_path, Mapping):
        return spec_from_dict(name_or_path, path="the hardware dict")
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise HardwareError(f"hardware takes a name ({', '.join(list_hardware())}), a spec file path, a "
                            f"HardwareSpec or a dict in the spec schema; got {type(name_or_path).__name__} "
                            f"{name_or_path!r:.80}")
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, Path) or text.endswith(".toml") or "/" in text or "\\" in text
    if looks_like_path:
        p = Path(text).expanduser()
        if not p.is_file():
            raise HardwareError(f"hardware spec file {text!r} does not exist; "
                                f"or use a packaged name: {', '.join(list_hardware())}")
        try:
            return _read(str(p), p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise HardwareError(f"cannot read hardware spec file {text!r}: {e}") from None
    names = list_hardware()
    key = text.strip().lower()
    if key not in names:
        raise HardwareError(f"unknown hardware {text!r}; {valid_choices(key, names, what='hardware')}")
    res = hardware_dir() / f"{key}.toml"
    return _read(f"hardware/{key}.toml", res.read_text(encoding="utf-8"))
