"""steptrace's modeled step against aiconfigurator's own step estimates
(engine/kernels/vendor_compare.py): the vendor's ops each mapped to a part, the quoted
shapes and the summary as docs/modeling.md, "Against the vendor's own step estimates",
states them (regenerated, they must read the same), and the CSV's errors named."""

from pathlib import Path

import pytest

from engine.kernels import vendor_compare as vc

pytestmark = pytest.mark.core  # runs the engine: the sanitizer stage runs it too

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "modeling.md"
# the repository's copy, not vc.CSV: the sanitizer stage imports an installed engine/
CSV = REPO / "workloads" / "validation" / "kernels" / "aiconfigurator_steps.csv"
CSV_V4 = CSV.with_name("aiconfigurator_steps_v4.csv")
V4 = "deepseek-v4-flash"
HEADING = "## Against the vendor's own step estimates"


def section() -> str:
    text = DOC.read_text()
    assert HEADING in text, f"{DOC}: no section {HEADING!r}"
    body = text.split(HEADING, 1)[1]
    ends = [i for i in (body.find("\n## "), body.find("\n### ")) if i >= 0]
    return body[:min(ends)] if ends else body


def test_every_vendor_op_is_one_part_and_the_parts_are_its_step():
    """Every V3 row's parts add to its step, whichever parts steptrace's tables time: the
    vendor's PDL discount (TensorRT-LLM's large-EP decode) is steptrace's own there."""
    rows = vc.read_rows(CSV)
    assert len(rows) == 1010
    for r in rows:
        for timed in ((), vc.COMPARED):
            parts = vc.vendor_parts(r, 61, 61, timed)  # no rescaling to 58 MoE layers
            assert sum(parts.values()) == pytest.approx(r.step_ms, abs=2e-3)


def test_every_v4_vendor_op_is_one_part_and_the_parts_are_its_step():
    """The vendor prices V4 without PDL: a part steptrace's tables time is brought to its
    TensorRT-LLM decode discount, one they do not keeps the vendor's time."""
    rows = vc.read_rows(CSV_V4)
    assert len(rows) == 808 and {r.pdl for r in rows} == {1.0}
    for r in rows:
        own = vc.vendor_parts(r, 43, 43)
        assert sum(own.values()) == pytest.approx(r.step_ms, abs=2e-3)
        timed = vc.vendor_parts(r, 43, 43, ("attention",))
        discounted = r.stack == "trtllm" and r.phase == "decode"
        assert timed["attention"] == pytest.approx(own["attention"] * (0.9 if discounted else 1))
        assert {p: timed[p] for p in own if p != "attention"} == \
            {p: own[p] for p in own if p != "attention"}


def test_v4_quoted_shapes_as_the_docs_state():
    table = vc.markdown(vc.SAMPLE_HEADER,
                        vc.sample_rows(vc.compare_all(vc.samples(vc.read_rows(CSV_V4), V4), V4)))
    assert table in section()


@pytest.mark.slow
def test_v4_summary_as_the_docs_state():
    table = vc.markdown(vc.summary_header(V4),
                        vc.summary_rows(vc.compare_all(vc.read_rows(CSV_V4), V4), V4))
    assert table in section()


def test_quoted_shapes_as_the_docs_state():
    table = vc.markdown(vc.SAMPLE_HEADER,
                        vc.sample_rows(vc.compare_all(vc.samples(vc.read_rows(CSV)))))
    assert table in section()


@pytest.mark.slow
def test_summary_as_the_docs_state():
    table = vc.markdown(vc.SUMMARY_HEADER, vc.summary_rows(vc.compare_all(vc.read_rows(CSV))))
    assert table in section()


def vendor_csv(tmp_path, **changes):
    lines = CSV.read_text().splitlines(keepends=True)
    header = lines[1].rstrip("\n").split(",")
    row = dict(zip(header, lines[2].rstrip("\n").split(",")))
    row.update(changes)
    path = tmp_path / "steps.csv"
    path.write_text(lines[0] + ",".join(header) + "\n" + ",".join(row[h] for h in header) + "\n")
    return path


@pytest.mark.parametrize("changes, message", [
    (dict(part_p2p="1.0"), r"steps.csv:3: the parts sum to 21.7398 ms, step_ms is 20.74"),
    (dict(precision_kv="fp6"), r"steps.csv:3: precision_kv: expected one of .*, got 'fp6'"),
])
def test_bad_rows_are_named(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        vc.read_rows(vendor_csv(tmp_path, **changes))


def test_an_unmapped_vendor_op_is_named(tmp_path):
    path = vendor_csv(tmp_path)
    lines = path.read_text().splitlines()
    path.write_text(f"{lines[0]}\n{lines[1]},part_new_op\n{lines[2]},0.0\n")
    with pytest.raises(ValueError, match=r"steps.csv:3: part_new_op: no steptrace part"):
        vc.read_rows(path)
