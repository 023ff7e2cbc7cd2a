"""The user-facing docs stay usable: every benchmark script they name exists (scripts move;
a command copied from the docs must still run), and the benchmarks page stays a page."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
SCRIPT = re.compile(r"\bbenchmarks/[\w/]+\.(?:py|sh)\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_benchmark_scripts_a_document_names_exist(doc):
    named = sorted(set(SCRIPT.findall(doc.read_text())))
    missing = [path for path in named if not (ROOT / path).is_file()]
    assert not missing, f"{doc.name} names scripts that do not exist: {missing}"


def test_the_benchmarks_page_holds_one_current_table_per_question_within_350_lines():
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(lines) <= 350, f"docs/benchmarks.md has {len(lines)} lines; history goes to NOTES"
