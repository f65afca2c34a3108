"""What the attribute decoders (`analyzer.hlo.attributes`) read of an instruction and of a module.

The decoders take anything of these shapes, so they import no IR: `analyzer.hlo.ir` builds on the decoders (an
`Instruction`'s typed views delegate to them), never the reverse. `ir.Instruction` and `ir.HloModule` are the
objects that meet them.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["AttributeLike", "InstructionLike", "ModuleLike"]


class AttributeLike(Protocol):
    """One `key=value` attribute as written (`ir.Attribute`)."""

    @property
    def key(self) -> str: ...

    @property
    def raw(self) -> str: ...

    @property
    def position(self) -> Any: ...  # (`ir.Position`, with `.line` and `.column`, or None)


class InstructionLike(Protocol):
    """What a decoder reads of an instruction (`ir.Instruction`): its name, for messages, and its attributes."""

    @property
    def name(self) -> str: ...

    @property
    def attributes(self) -> tuple[AttributeLike, ...]: ...

    @property
    def attribute_keys(self) -> tuple[str, ...]: ...

    def attribute(self, key: str) -> AttributeLike | None: ...

    def attr(self, key: str) -> str | None: ...

    @property
    def use_global_device_ids(self) -> bool: ...


class ModuleLike(Protocol):
    """What a decoder reads of a module (`ir.HloModule`): how many replicas and partitions it runs on."""

    @property
    def num_partitions(self) -> int: ...

    @property
    def replica_count(self) -> int: ...
