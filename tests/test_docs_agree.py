"""The docs hold together: README.md's Documentation list indexes every page, and a figure
stated in several places (README.md, CONTRIBUTING.md, docs/*.md) is the same figure in each.
A fact is declared once below: its name and the regex that finds a statement of it, the
figure its one group."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
INDEXED = ("docs/*.md", "docs/design/README.md", "tests/bench/README.md",
           "workloads/traces/README.md")
LINK = re.compile(r"\]\(([^)#\s]+)")
WORDS = {"two": "2", "three": "3", "four": "4", "five": "5"}


@dataclass(frozen=True)
class Fact:
    name: str
    statement: str  # a regex; its one group is the figure


FACTS = (
    # `.ci/run` end to end: "about 27 minutes end to end", "25 min end to end"
    Fact("ci_run_minutes", r"\b(\d+)\s+min(?:utes?)?,?\s+end\s+to\s+end\b"),
    # the quick tier's time, in the sentence or table cell that names `python -m pytest`
    Fact("quick_tier_seconds", r"`python -m pytest`[^|]{0,300}?\b(\d+)\s+s\b"),
    # the quick tier's limit: "under 3 minutes"
    Fact("quick_tier_limit_minutes",
         r"(?:quick tier|`python -m pytest`)[^|]{0,300}?\bunder\s+(\d+|two|three|four|five)"
         r"\s+minutes\b"),
)


def sources() -> Dict[str, str]:
    paths = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted(REPO.glob("docs/*.md"))]
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in paths}


def statements(fact: Fact, texts: Dict[str, str]) -> List[Tuple[str, int, str]]:
    """(file, line, figure) of every statement of the fact."""
    return [(name, text.count("\n", 0, m.start()) + 1, WORDS.get(m.group(1), m.group(1)))
            for name, text in texts.items() for m in re.finditer(fact.statement, text)]


def disagreements(fact: Fact, texts: Dict[str, str]) -> List[str]:
    """What is wrong with the fact's statements: none found, or figures that differ."""
    found = statements(fact, texts)
    if not found:
        return [f"{fact.name}: no statement found (its regex: {fact.statement})"]
    if len({figure for _, _, figure in found}) == 1:
        return []
    return [f"{fact.name}: the statements differ: " + ", ".join(
        f"{name}:{line} says {figure}" for name, line, figure in found)]


def documentation_list(readme: str) -> str:
    return readme.partition("\n## Documentation\n")[2].split("\n## ")[0]


def unindexed(readme: str) -> List[str]:
    linked = set(LINK.findall(documentation_list(readme)))
    pages = sorted(str(p.relative_to(REPO)) for pattern in INDEXED for p in REPO.glob(pattern))
    return [page for page in pages if page not in linked]


def test_every_page_is_in_the_readmes_documentation_list():
    missing = unindexed((REPO / "README.md").read_text(encoding="utf-8"))
    assert not missing, f"README.md's Documentation list does not link: {missing}"


def test_a_new_page_not_in_the_list_is_named():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    without = re.sub(r"\n- \[docs/gil\.md\]\(docs/gil\.md\)[^\n]*", "", readme)
    assert without != readme and unindexed(without) == ["docs/gil.md"]


def test_each_fact_is_stated_alike_everywhere():
    texts = sources()
    wrong = [problem for fact in FACTS for problem in disagreements(fact, texts)]
    assert not wrong, wrong


def test_a_statement_that_drifted_is_named():
    texts = {"README.md": "`bash .ci/run` (about 27 minutes end to end on 2 cores).\n",
             "CONTRIBUTING.md": "| CI | `bash .ci/run`: 25 min end to end |\n",
             "other.md": "a sweep of 12 minutes, end of story\n"}
    assert disagreements(FACTS[0], texts) == [
        "ci_run_minutes: the statements differ: README.md:1 says 27, CONTRIBUTING.md:1 says 25"]
    assert disagreements(FACTS[0], {"other.md": texts["other.md"]})[0].startswith(
        "ci_run_minutes: no statement found")
    quick = {"README.md": "- `python -m pytest` runs the quick tier (84 s on 2 cores; under "
                          "3 minutes)",
             "CONTRIBUTING.md": "| the quick tier | `python -m pytest`: every test (90 s, "
                                "under three minutes) |\n| the slow tier | 564 s |"}
    assert disagreements(FACTS[1], quick) == [
        "quick_tier_seconds: the statements differ: README.md:1 says 84, CONTRIBUTING.md:1 "
        "says 90"]
    assert disagreements(FACTS[2], quick) == []
