"""Reading the requests table back (harness.record.table_reader.read_requests): the same frame as
pandas reads, a row group at a time, whatever each chunk's own text dictionary."""

import numpy as np
import pandas as pd
import pytest

from harness.record.table_reader import read_frame, read_requests
from harness.record.table_sink import TableSink
from harness.schema import TABLES


def chunk(ids, status, reason):
    n = len(ids)
    columns = {c.name: np.zeros(n, c.type.to_pandas_dtype()) for c in TABLES["requests"].columns}
    columns.update(request_id=np.asarray(ids, np.int64), arrival_s=np.asarray(ids, float) / 10,
                   status=[status] * n, reason=[reason] * n)
    return pd.DataFrame(columns)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_a_table_written_in_chunks_reads_back_as_pandas_reads_it(tmp_path, fmt):
    sink = TableSink(tmp_path, "requests", fmt, dict(run_id="r"))
    sink.write(chunk([3, 1], "finished", ""))  # completion order, as the recorder writes
    sink.write(chunk([0], "rejected", "needs 9 KV blocks"))
    sink.write(chunk([2, 4], "unfinished", "never enqueued"))
    path = sink.close()
    plain = (pd.read_parquet if fmt == "parquet" else pd.read_csv)(path)
    got = read_requests(path, ordered=False)
    assert got["request_id"].tolist() == [3, 1, 0, 2, 4]
    assert got["status"].dtype == "category" and got["reason"].dtype == "category"
    for name in plain.columns:
        assert got[name].astype(str).tolist() == plain[name].astype(str).tolist(), name
    ordered = read_requests(path, ["status"])
    assert list(ordered.columns) == ["request_id", "status"]
    assert ordered["request_id"].tolist() == [0, 1, 2, 3, 4]
    assert ordered["status"].tolist() == ["rejected", "finished", "unfinished", "finished",
                                          "unfinished"]


def test_a_frame_filtered_on_a_column_not_read_is_the_same_whichever_format(tmp_path):
    """where=(column, value) with the column not among those asked for: the rows holding
    the value (compared as the schema declares the column), without that column."""
    frames = {}
    for fmt in ("parquet", "csv"):
        (tmp_path / fmt).mkdir()
        sink = TableSink(tmp_path / fmt, "requests", fmt, dict(run_id="r"))
        sink.write(chunk([0, 1, 2], "finished", ""))
        sink.write(chunk([10, 11], "rejected", "needs 9 KV blocks"))
        path = sink.close()
        frames[fmt] = [read_frame(path, ["request_id"], where=("status", "rejected")),
                       read_frame(path, ["status"], where=("request_id", 11)),
                       read_frame(path, ["status"], where=("request_id", 1.0))]
    for parquet, csv in zip(frames["parquet"], frames["csv"]):
        assert list(parquet.columns) == list(csv.columns)
        assert parquet.astype(str).to_dict("records") == csv.astype(str).to_dict("records")
    assert frames["csv"][0]["request_id"].tolist() == [10, 11]
    assert frames["csv"][1]["status"].tolist() == ["rejected"]
    assert frames["csv"][2]["status"].tolist() == ["finished"]
