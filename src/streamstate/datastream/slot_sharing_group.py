"""``SlotSharingGroup`` and ``MemorySize``, as ``pyflink.datastream.slot_sharing_group``.

Flink places operators of one slot sharing group into the same task slots and sizes the
slots from the group's resources. Spark schedules streamstate's subtasks; there are no
slots. A group is accepted and kept (``DataStream.slot_sharing_group(...)``,
``env.register_slot_sharing_group(...)``) and shown by ``get_execution_plan()``, and the
resources are read back as given, but they place and size nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from streamstate.errors import ConfigurationError

__all__ = ["MemorySize", "SlotSharingGroup"]

_KIB = 1024


@functools.total_ordering
class MemorySize:
    """A number of bytes, viewable in binary units (Flink's ``MemorySize``)."""

    def __init__(self, j_memory_size: Any = None, bytes_size: int | None = None) -> None:
        size = bytes_size if bytes_size is not None else j_memory_size
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ConfigurationError(f"a memory size is a number of bytes >= 0, got {size!r}")
        self._bytes = size

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> MemorySize:
        return MemorySize(bytes_size=mebi_bytes * _KIB * _KIB)

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes >> 10

    def get_mebi_bytes(self) -> int:
        return self._bytes >> 20

    def get_gibi_bytes(self) -> int:
        return self._bytes >> 30

    def get_tebi_bytes(self) -> int:
        return self._bytes >> 40

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemorySize) and self._bytes == other._bytes

    def __lt__(self, other: MemorySize) -> bool:
        if not isinstance(other, MemorySize):
            return NotImplemented
        return self._bytes < other._bytes

    def __hash__(self) -> int:
        return hash(("MemorySize", self._bytes))

    def __str__(self) -> str:
        return f"{self._bytes} bytes"

    def __repr__(self) -> str:
        return f"MemorySize({self._bytes})"


class SlotSharingGroup:
    """A named group of operators with the resources Flink would give its slots."""

    def __init__(
        self,
        j_slot_sharing_group: Any = None,
        *,
        cpu_cores: float | None = None,
        task_heap_memory: MemorySize | None = None,
        task_off_heap_memory: MemorySize | None = None,
        managed_memory: MemorySize | None = None,
        external_resources: dict[str, float] | None = None,
    ) -> None:
        name = j_slot_sharing_group
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"a slot sharing group needs a non-empty name, got {name!r}: "
                f"use SlotSharingGroup.builder('name').build()"
            )
        self._name = name
        self._cpu_cores = cpu_cores
        self._task_heap_memory = task_heap_memory
        self._task_off_heap_memory = task_off_heap_memory
        self._managed_memory = managed_memory
        self._external_resources = dict(external_resources or {})

    @staticmethod
    def builder(name: str) -> SlotSharingGroup.Builder:
        return SlotSharingGroup.Builder(name)

    def get_name(self) -> str:
        return self._name

    def get_cpu_cores(self) -> float | None:
        return self._cpu_cores

    def get_task_heap_memory(self) -> MemorySize | None:
        return self._task_heap_memory

    def get_task_off_heap_memory(self) -> MemorySize | None:
        return self._task_off_heap_memory

    def get_managed_memory(self) -> MemorySize | None:
        return self._managed_memory

    def get_external_resources(self) -> dict[str, float]:
        return dict(self._external_resources)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SlotSharingGroup) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f"SlotSharingGroup({self._name!r})"

    class Builder:
        """``SlotSharingGroup.builder(name).set_cpu_cores(1.0)....build()``."""

        def __init__(self, name: str) -> None:
            self._name = name
            self._kw: dict[str, Any] = {"external_resources": {}}

        def set_cpu_cores(self, cpu_cores: float) -> SlotSharingGroup.Builder:
            if cpu_cores <= 0:
                raise ConfigurationError(f"cpu cores must be > 0, got {cpu_cores!r}")
            self._kw["cpu_cores"] = float(cpu_cores)
            return self

        def set_task_heap_memory(self, task_heap_memory: MemorySize) -> SlotSharingGroup.Builder:
            self._kw["task_heap_memory"] = task_heap_memory
            return self

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int) -> SlotSharingGroup.Builder:
            return self.set_task_heap_memory(MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(
            self, task_off_heap_memory: MemorySize
        ) -> SlotSharingGroup.Builder:
            self._kw["task_off_heap_memory"] = task_off_heap_memory
            return self

        def set_task_off_heap_memory_mb(
            self, task_off_heap_memory_mb: int
        ) -> SlotSharingGroup.Builder:
            return self.set_task_off_heap_memory(MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize) -> SlotSharingGroup.Builder:
            self._kw["managed_memory"] = managed_memory
            return self

        def set_managed_memory_mb(self, managed_memory_mb: int) -> SlotSharingGroup.Builder:
            return self.set_managed_memory(MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float) -> SlotSharingGroup.Builder:
            self._kw["external_resources"][name] = float(value)
            return self

        def build(self) -> SlotSharingGroup:
            given = [k for k, v in self._kw.items() if v]
            if given and not ("cpu_cores" in given and "task_heap_memory" in given):
                raise ConfigurationError(
                    "a slot sharing group with resources needs cpu cores and task heap "
                    "memory (Flink's rule): call set_cpu_cores() and set_task_heap_memory()"
                )
            return SlotSharingGroup(self._name, **self._kw)
