"""Markdown tables and the headline's row: what the report and the scenarios' sections share
(apart, so that neither imports the other)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    """One line of the headline table."""

    what: str
    measured: str
    target: str
    met: bool | None
    """None: no target, a figure for information."""

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: ""}[self.met]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; numbers right-aligned."""
    align = [
        "---:" if rows and isinstance(rows[0][i], int | float) else "---"
        for i in range(len(headers))
    ]
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 10:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
