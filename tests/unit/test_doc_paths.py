"""The test and benchmark files the docs name exist (a moved file's old path is found here)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_or_benchmark_file_a_page_names_exists() -> None:
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    missing = [
        f"{page.name}: {path}"
        for page in pages
        for path in sorted(
            set(re.findall(r"\b(?:tests|benchmarks)/[a-z0-9_/]+\.py\b", page.read_text()))
        )
        if not (ROOT / path).exists()
    ]
    assert not missing, f"pages name files that do not exist (moved? fix the path): {missing}"
