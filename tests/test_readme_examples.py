"""The README's example outputs are what their commands print today (tests/readme_examples.py):
exactly where the model decides them, in shape where the host times them."""

import pytest

from tests import readme_examples

pytestmark = pytest.mark.slow  # each example starts steptrace commands


@pytest.mark.parametrize("name", list(readme_examples.EXAMPLES))
def test_the_readme_example_is_its_commands_output(name, capsys):
    assert readme_examples.main([name]) == 0, capsys.readouterr().out


def test_a_changed_figure_is_found_and_a_host_timing_is_not():
    example = readme_examples.EXAMPLES["pd"]
    shown = ["  ttft p50                            0.3159 s",
             "  process_cpu mean                     23.92 %"]
    assert readme_examples.differences(example, shown, [
        "  ttft p50                            0.3159 s",
        "  process_cpu mean                     61.5 %",
        "  note: busy host: other processes held 82% of the host's CPU"]) == []
    assert readme_examples.differences(example, shown, [
        "  ttft p50                            0.3160 s",
        "  process_cpu mean                     23.92 %"]) == [
        "line 1: README '  ttft p50                            0.3159 s', the command "
        "'  ttft p50                            0.3160 s'"]
