"""The Item and Rule classes the broadcast state page's fragments assume (not in the docs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    color: str
    shape: str

    def get_shape(self) -> str:
        return self.shape

    def __str__(self) -> str:
        return f"{self.color} {self.shape}"


@dataclass(frozen=True)
class Rule:
    name: str
    first: str
    second: str
