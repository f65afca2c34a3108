"""How many devices a module runs on, when its header does not say.

Modules from `jax.jit(...).lower().compile()` carry `num_partitions` (and `replica_count`) in their header.
Dumps handed over from real runs often do not (GPU data-parallel programs, modules cut out of a dump, older
XLA versions), but their collectives do: every device id appears in some replica group or
source-target pair, so the largest id plus one is the device count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from analyzer.hlo.opcodes import ASYNC_COLLECTIVE_STARTS, COLLECTIVES

if TYPE_CHECKING:
    from analyzer.hlo.ir import HloModule

__all__ = ["DeviceCount", "device_count"]

_GROUPED = tuple(sorted(COLLECTIVES | ASYNC_COLLECTIVE_STARTS))  # (their device groups say how many devices run)


@dataclass(frozen=True)
class DeviceCount:
    """The module's device count and where it was read: "header" or "collectives" (ids seen in groups)."""

    devices: int
    source: str

    @property
    def note(self) -> str:
        """A sentence for the report when the count was not in the header; "" when it was."""
        if self.source == "header":
            return ""
        return (f"The module's header gives no device count (num_partitions / replica_count); read "
                f"{self.devices} devices from the device ids in its collectives' groups.")


def device_count(module: HloModule) -> DeviceCount:
    """The number of devices `module` runs on.

    The header's `replica_count * num_partitions` when it names more than one device; otherwise the largest
    device id in any collective's replica groups or source-target pairs, plus one (1 when there is none).

    Example:
        >>> from analyzer.hlo.parser import parse_hlo
        >>> m = parse_hlo('''HloModule m
        ... ENTRY e {
        ...   p = f32[8] parameter(0)
        ...   ROOT ag = f32[32] all-gather(p), replica_groups=[2,4]<=[8], dimensions={0}
        ... }''')
        >>> device_count(m)
        DeviceCount(devices=8, source='collectives')
    """
    header = module.num_partitions * max(1, module.replica_count)
    if header > 1:
        return DeviceCount(header, "header")
    highest = -1
    for comp in module.computations:
        for inst in comp.select(*_GROUPED):
            try:
                groups = inst.replica_groups or ()
                pairs = inst.source_target_pairs or ()
            except Exception:  # noqa: BLE001 - undecodable groups are reported by the collective extraction
                continue
            for group in groups:
                if group:
                    highest = max(highest, max(group))
            for pair in pairs:
                highest = max(highest, *pair)
    if highest >= 1:
        return DeviceCount(highest + 1, "collectives")
    return DeviceCount(1, "header")
