"""streamstate's public surface against PyFlink's (tools/pyflink_surface.json).

Every PyFlink DataStream-side name resolves here with a compatible signature, or is in
the reviewed exclusions file (src/streamstate/common/pyflink_compat.toml) with a reason and
what to do instead; docs/pyflink-compat.md is generated from both and must be current.
"""

from __future__ import annotations

import pytest

from tools import pyflink_compat as compat

#: share of PyFlink's names supported (plainly or with a different meaning), in percent
SUPPORTED_FLOOR = 95.0


@pytest.fixture(scope="module")
def entries() -> list[compat.Entry]:
    return compat.compare()


def test_every_pyflink_name_is_supported_or_excluded(entries):
    defects = [
        f"{e.name}: {e.status}: {e.detail}"
        for e in entries
        if e.status in (compat.MISSING, compat.SIGNATURE, compat.STALE)
    ]
    assert not defects, "support these PyFlink names or exclude them with a reason:\n" + (
        "\n".join(sorted(defects))
    )


def test_unsupported_modules_have_no_counterpart_and_say_why():
    assert compat.module_problems() == []
    for name, info in compat.load_exclusions()["unsupported_modules"].items():
        assert name.startswith("pyflink.") and info["reason"].strip() and info["instead"].strip()


def test_supported_share_reaches_the_floor(entries):
    ok = sum(1 for e in entries if e.status in (compat.SUPPORTED, compat.DIFFERENT))
    assert 100 * ok / len(entries) >= SUPPORTED_FLOOR


def test_every_exclusion_says_why_and_what_instead():
    excl = compat.load_exclusions()
    for name, info in excl["unsupported"].items():
        assert info.get("reason", "").strip(), f"{name}: no reason"
        assert info.get("instead", "").strip(), f"{name}: no 'instead'"
    for name, info in excl["different"].items():
        assert info.get("meaning", "").strip(), f"{name}: no meaning"


def test_compat_doc_is_current(entries):
    assert compat.DOC.read_text() == compat.render(entries), (
        "docs/pyflink-compat.md is out of date: run .venv/bin/python tools/pyflink_compat.py"
    )


def test_signature_check_catches_incompatible_calls():
    pf = [["func", "positional", False], ["output_type", "positional", True]]
    assert (
        compat.signature_problem(
            pf, [["func", "positional", False], ["output_type", "positional", True]]
        )
        == ""
    )
    assert compat.signature_problem(pf, [["f", "positional", False]]) != ""
    assert compat.signature_problem(pf, [["func", "positional", False]]) != ""
    assert (
        compat.signature_problem(
            pf, [["func", "positional", False], ["output_type", "positional", False]]
        )
        != ""
    )
    assert (
        compat.signature_problem(
            pf, [["args", "var_positional", False], ["kw", "var_keyword", False]]
        )
        == ""
    )
    extra = [
        ["func", "positional", False],
        ["output_type", "positional", True],
        ["x", "keyword_only", False],
    ]
    assert compat.signature_problem(pf, extra) != ""


def test_kind_check_catches_members_used_differently():
    def method(self):
        return 1

    assert compat._kind_problem("property", method) != ""
    assert compat._kind_problem("property", property(method)) == ""
    assert compat._kind_problem("staticmethod", method) != ""
    assert compat._kind_problem("staticmethod", staticmethod(method)) == ""
    assert compat._kind_problem("method", 3) != ""
    assert compat._kind_problem("method", method) == ""


def test_signature_check_compares_literal_defaults():
    pf = [["capacity", "positional", True, "100"]]
    assert compat.signature_problem(pf, [["capacity", "positional", True, "100"]]) == ""
    assert "default" in compat.signature_problem(pf, [["capacity", "positional", True, "10"]])
    assert compat.signature_problem(pf, [["capacity", "positional", True, None]]) == ""
