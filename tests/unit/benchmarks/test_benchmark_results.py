"""docs/benchmarks.md is generated from benchmarks/results/*.json, one result per benchmark."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks import report, results
from benchmarks.results import ResultFormatError, Run, Sitting, Table

#: modules of benchmarks/ that measure nothing themselves
NOT_BENCHMARKS = {
    "__init__",
    "results",
    "report",
    "cluster_bed",
    "spark_timeline",
    "process_cpu",
}


def benchmark_modules() -> list[str]:
    return sorted(
        p.stem for p in results.BENCHMARKS_DIR.glob("*.py") if p.stem not in NOT_BENCHMARKS
    )


def test_the_committed_page_is_the_generators_output() -> None:
    page = report.PAGE.read_text(encoding="utf-8")
    expected = report.render(results.load_all())
    assert page == expected, (
        "docs/benchmarks.md is generated: edit benchmarks/results/NAME.json, then run "
        "`.venv/bin/python -m benchmarks.report` (never edit the page by hand)"
    )


def test_the_page_says_it_is_generated_and_how_to_add_a_result() -> None:
    top = report.PAGE.read_text(encoding="utf-8")[:2500]
    assert "This page is generated" in top
    assert "How to add a result" in top


@pytest.mark.parametrize("module", benchmark_modules())
def test_every_benchmark_module_has_a_result(module: str) -> None:
    path = results.result_path(module)
    assert path.exists(), f"benchmarks/{module}.py has no result: write {path}"
    result = results.load(path)
    assert result.module == f"benchmarks/{module}.py"
    assert all(run.tables for run in result.runs), "every run has at least one table"


def test_every_result_of_a_module_names_an_existing_module() -> None:
    for result in results.load_all():
        if result.module is not None:
            assert (results.REPO_DIR / result.module).exists(), result.module


def test_result_files_are_written_as_the_format_dumps_them() -> None:
    for path in sorted(results.RESULTS_DIR.glob("*.json")):
        assert path.read_text(encoding="utf-8") == results.dump(results.load(path)), path


def _a_result(tmp_path: Path) -> Path:
    table = Table(("variant", "records/s", "ratio"), (("base", "100", "1.00"),))
    run = Run("python -m benchmarks.x", "2026-11-28", "1.0-2.0", "2 cores", (table,))
    result = results.Result("x", "X", "What x measures.", (run,), ("a caveat",), "benchmarks/x.py")
    return results.save(result, tmp_path)


def test_a_newer_format_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = _a_result(tmp_path)
    data = json.loads(path.read_text())
    data["format"] = results.FORMAT_VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFormatError, match="format 2, this checkout reads format 1"):
        results.load(path)


def test_a_row_of_the_wrong_width_is_refused(tmp_path: Path) -> None:
    path = _a_result(tmp_path)
    data = json.loads(path.read_text())
    data["runs"][0]["tables"][0]["rows"].append(["only", "two"])
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFormatError, match="2 cells for 3 columns"):
        results.load(path)


def test_a_file_named_for_another_benchmark_is_refused(tmp_path: Path) -> None:
    path = _a_result(tmp_path)
    path.rename(tmp_path / "y.json")
    with pytest.raises(ResultFormatError, match="name the file x.json"):
        results.load(tmp_path / "y.json")


def test_recording_a_run_replaces_it_and_keeps_the_rest(tmp_path: Path) -> None:
    _a_result(tmp_path)
    sitting = Sitting.begin("benchmarks.x", ["--records", "5", "--result"])
    table = Table(("variant", "records/s", "ratio"), (("base", "120", "1.00"),))
    results.record("x", sitting.run([table], notes=["quiet"]), tmp_path)
    result = results.load(tmp_path / "x.json")
    assert result.notes == ("a caveat",) and result.about == "What x measures."
    (run,) = result.runs
    assert run.command == "python -m benchmarks.x --records 5"
    assert run.tables == (table,) and run.notes == ("quiet",)
    low, high = (float(x) for x in run.load_average.split("-"))
    assert 0 <= low <= high
    page = report.render([result])
    assert "| base | 120 | 1.00 |" in page and "python -m benchmarks.x --records 5" in page


def test_recording_for_a_benchmark_without_a_file_says_what_to_do(tmp_path: Path) -> None:
    run = Sitting.begin("benchmarks.z", []).run([Table(("a",), (("1",),))])
    with pytest.raises(ResultFormatError, match="write it once by hand"):
        results.record("z", run, tmp_path)


def test_the_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    _a_result(tmp_path)
    page = tmp_path / "page.md"
    assert report.main(["--results", str(tmp_path), "--page", str(page)]) == 0
    assert report.main(["--check", "--results", str(tmp_path), "--page", str(page)]) == 0
    page.write_text(page.read_text() + "hand edit\n")
    assert report.main(["--check", "--results", str(tmp_path), "--page", str(page)]) == 1


def test_links_into_the_page_name_its_headings() -> None:
    """Other pages link to a benchmark's figures by heading; a renamed one is found here."""
    anchors = {
        report.slug(line.lstrip("#").strip())
        for line in report.PAGE.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    pages = [*sorted((results.REPO_DIR / "docs").glob("*.md")), results.REPO_DIR / "README.md"]
    broken = [
        f"{page.name}: #{anchor}"
        for page in pages
        for anchor in re.findall(r"benchmarks\.md#([\w-]+)", page.read_text(encoding="utf-8"))
        if anchor not in anchors
    ]
    assert not broken, f"links to headings docs/benchmarks.md does not have: {broken}"


def test_a_benchmarks_figures_become_tables() -> None:
    figures = {"rest_off_rps": 177649, "ratio": 1.0234, "lat": {"median_ms": 4.61, "p": 0.0412}}
    assert results.figures_table(figures).rows == (
        ("rest_off_rps", "177,649"),
        ("ratio", "1.02"),
        ("lat / median_ms", "4.61"),
        ("lat / p", "0.0412"),
    )
    table = results.rows_table([{"keys": 10, "s": 123.4}, {"keys": 100, "extra": True}])
    assert table.columns == ("keys", "s", "extra")
    assert table.rows == (("10", "123", ""), ("100", "", "True"))


@pytest.mark.parametrize("module", benchmark_modules())
def test_every_benchmark_can_write_its_result(module: str) -> None:
    source = (results.BENCHMARKS_DIR / f"{module}.py").read_text(encoding="utf-8")
    takes_result = "add_result_option(" in source or '"--result"' in source
    assert takes_result, f"benchmarks/{module}.py takes no --result"
    records = f'record("{module}"' in source or re.search(rf'publish\(\s*"{module}"', source)
    assert records, f"benchmarks/{module}.py records no result"
