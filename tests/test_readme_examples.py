"""The example outputs README.md and the docs show are what their commands print today
(tests/readme_examples.py): exactly where the model decides them, in shape where the host
times them."""

from pathlib import Path

import pytest

from tests import readme_examples

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # each example starts steptrace commands
@pytest.mark.parametrize("name", list(readme_examples.EXAMPLES))
def test_the_example_is_its_commands_output(name, capsys):
    assert readme_examples.main([name]) == 0, capsys.readouterr().out


def test_every_marked_block_is_checked_on_the_page_it_is_on():
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    marked = {(name, str(page.relative_to(REPO))) for page in pages
              for name in readme_examples.MARKER.findall(page.read_text())}
    declared = {(e.name, e.page) for e in readme_examples.EXAMPLES.values()}
    assert marked == declared, (f"marked on a page, not checked there: {marked - declared}; "
                                f"checked, not marked on its page: {declared - marked}")


def test_a_changed_figure_is_found_and_a_host_timing_is_not():
    example = readme_examples.EXAMPLES["pd"]
    shown = ["  ttft p50                            0.3159 s",
             "  process_cpu mean                     23.92 %"]
    assert readme_examples.differences(example, shown, [
        "  ttft p50                            0.3159 s",
        "  process_cpu mean                     61.5 %",
        "  note: busy host: other processes held 82% of the host's CPU"]) == []
    # a run over before the sampler's first interval has no CPU lines: the host's to give
    assert readme_examples.differences(example, shown, [
        "  ttft p50                            0.3159 s"]) == []
    assert readme_examples.differences(example, shown, [
        "  ttft p50                            0.3160 s",
        "  process_cpu mean                     23.92 %"]) == [
        "line 1: shown '  ttft p50                            0.3159 s', the command "
        "'  ttft p50                            0.3160 s'"]
