"""One ordered list of the gate's scenarios, and prose that tells the truth about it: the README counts and names
every scenario, and docs/guardrails.md's table is generated from the list."""

from __future__ import annotations

import re
from pathlib import Path

from guardrail_scenarios import ORDER, SCENARIOS, scenario_table

ROOT = Path(__file__).resolve().parents[2]
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def _counts_said(text: str) -> set[str]:
    return set(re.findall(r"\b(\w+) (?:canonical )?scenarios\b", text)) & set(NUMBERS)


def test_the_list_is_built_once_in_order_and_keyed_by_name() -> None:
    assert list(SCENARIOS) == [scenario.name for scenario in ORDER]
    assert [name[0] for name in SCENARIOS] == [chr(ord("a") + index) for index in range(len(ORDER))]
    assert all(scenario.purpose for scenario in ORDER)


def test_the_readme_counts_and_names_every_scenario() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _counts_said(readme) == {NUMBERS[len(ORDER)]}
    section = readme.split("## The guardrails", 1)[1].split("| guardrail |", 1)[0]
    assert [f"({name[0]})" for name in SCENARIOS if f"({name[0]})" not in section] == []


def test_a_wrong_count_is_seen() -> None:
    assert _counts_said("the gate runs nine canonical scenarios; # 4. six scenarios against") == {"nine", "six"}


def test_the_guardrails_doc_lists_the_scenarios_as_they_are() -> None:
    doc = (ROOT / "docs" / "guardrails.md").read_text(encoding="utf-8")
    table = doc.split("<!-- scenarios:begin -->\n", 1)[1].split("\n<!-- scenarios:end -->", 1)[0]
    assert table == scenario_table(), "paste scenario_table() from tests/guardrails/guardrail_scenarios.py"
