"""Traces: every reader on small fixtures, every bad-input path, dropping and counting, the
exporters' round trips, the generators' statistics, the trace commands, and the real Azure
trace bundled in workloads/traces/."""

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from harness.commands import main as run
from harness.commands.trace import trace_stats
from harness.traces.generate import fixed, generate, lognormal, sampled_from, uniform
from harness.traces.read import DROP_REASONS, TraceError, check_trace, read_trace
from harness.traces.write import write_mooncake, write_tidy

AZURE = Path(__file__).resolve().parents[1] / "workloads" / "traces" / "AzureLLMInferenceTrace_code.csv"
AZURE_SHA256 = "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def put(tmp_path, name, text, crlf=False):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", "\r\n" if crlf else "\n").encode())
    return path


def jsonl(tmp_path, records, name="trace.jsonl"):
    return put(tmp_path, name, "\n".join(r if isinstance(r, str) else json.dumps(r)
                                         for r in records) + "\n")


def azure_rows(*rows):
    return "\n".join([AZURE_HEADER, *rows])  # no final newline, like the real file


# ---------------------------------------------------------------- readers

def test_azure_2023_crlf_no_final_newline(tmp_path):
    path = put(tmp_path, "trace.csv", azure_rows(
        "2023-11-16 18:17:03.9799600,4808,10", "2023-11-16 18:17:04.0319600,3180,8",
        "2023-11-16 18:17:05.0000000,110,27"), crlf=True)
    assert path.read_bytes().count(b"\r\n") == 3 and not path.read_bytes().endswith(b"\n")
    res = read_trace(path)
    assert res.source == "azure" and res.dropped == {} and res.hash_block_size is None
    assert res.df.arrival_s.tolist() == pytest.approx([0.0, 0.052, 1.02004], abs=1e-9)
    assert res.df.prompt_len.tolist() == [4808, 3180, 110]
    assert res.df.max_new_tokens.tolist() == [10, 8, 27]
    assert list(res.df.columns) == ["arrival_s", "prompt_len", "max_new_tokens"]
    assert [str(t) for t in res.df.dtypes] == ["float64", "int64", "int64"]


def test_azure_2024_with_offset(tmp_path):
    path = put(tmp_path, "week.csv", azure_rows(
        "2024-05-10 23:59:59.5000000+00:00,100,20", "2024-05-11 00:00:00.2500000+00:00,200,30"))
    df = read_trace(path).df
    assert df.arrival_s.tolist() == pytest.approx([0.0, 0.75])
    assert df.prompt_len.tolist() == [100, 200]


def test_mooncake_ms_with_hash_ids(tmp_path):
    path = jsonl(tmp_path, [
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 600, "output_length": 4, "hash_ids": [0, 2]},
        {"timestamp": 1500, "input_length": 20, "output_length": 1, "hash_ids": [3]}])
    res = read_trace(path)
    assert (res.source, res.time_unit, res.hash_block_size) == ("mooncake", "ms", 512)
    assert res.df.arrival_s.tolist() == [0.0, 1.5, 1.5]  # equal arrivals are in order
    assert res.df.hash_ids.tolist() == [[0, 1], [0, 2], [3]]
    assert res.df.attrs["hash_block_size"] == 512


def test_bailian_seconds_with_hash_ids(tmp_path):
    rec = dict(chat_id=7, parent_chat_id=-1, type="text", turn=1)
    path = jsonl(tmp_path, [
        {**rec, "timestamp": 61.114, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]},
        {**rec, "timestamp": 61.5, "input_length": 33, "output_length": 9, "hash_ids": [1, 2, 4]}])
    res = read_trace(path)
    assert (res.time_unit, res.hash_block_size) == ("s", 16)
    assert res.df.arrival_s.tolist() == pytest.approx([0.0, 0.386])
    assert res.df.hash_ids.tolist() == [[1, 2, 3], [1, 2, 4]]


def test_mooncake_time_unit_and_block_size_options(tmp_path):
    path = jsonl(tmp_path, [{"timestamp": 3, "input_length": 5, "output_length": 1, "hash_ids": [0]},
                            {"timestamp": 5, "input_length": 5, "output_length": 1, "hash_ids": [1]}])
    assert read_trace(path).df.arrival_s.tolist() == [0.0, 0.002]  # integers: ms
    res = read_trace(path, time_unit="s", hash_block_size=32)
    assert res.df.arrival_s.tolist() == [0.0, 2.0] and res.hash_block_size == 32


def test_burstgpt_failed_requests_dropped_and_counted(tmp_path):
    path = put(tmp_path, "burst.csv", "\n".join([
        BURST_HEADER, "5,ChatGPT,472,18,490,Conversation log", "45,ChatGPT,1087,0,1087,Conversation log",
        "118,GPT-4,417,276,693,API log"]) + "\n")
    res = read_trace(path)
    assert res.source == "burstgpt" and res.dropped == {"failed_request": 1}
    assert res.df.arrival_s.tolist() == [0.0, 113.0]
    assert res.df.prompt_len.tolist() == [472, 417] and res.df.max_new_tokens.tolist() == [18, 276]
    assert res.manifest()["dropped"] == {"failed_request": 1}


def test_vidur(tmp_path):
    path = put(tmp_path, "vidur.csv", "id,arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                      "0,0.5,100,20.0\n1,0.75,200,40\n")
    res = read_trace(path)
    assert res.source == "vidur"
    assert res.df.arrival_s.tolist() == [0.0, 0.25] and res.df.max_new_tokens.tolist() == [20, 40]


def test_tidy_csv_and_parquet(tmp_path):
    path = put(tmp_path, "t.csv", "arrival_s,prompt_len,max_new_tokens\n2.0,8,4\n2.5,5,1\n\n")
    res = read_trace(path)
    assert res.source == "tidy" and res.df.arrival_s.tolist() == [0.0, 0.5]  # blank line skipped
    write_tidy(res.df, tmp_path / "t.parquet")
    back = read_trace(tmp_path / "t.parquet")
    assert back.source == "tidy"
    pd.testing.assert_frame_equal(back.df, res.df)


def test_a_tidy_file_may_call_max_new_tokens_output_len(tmp_path):
    old = put(tmp_path, "old.csv", "arrival_s,prompt_len,output_len\n0,8,4\n1,5,x\n")
    with pytest.raises(TraceError, match=r"old\.csv:3: output_len: expected an integer >= 1, got 'x'"):
        read_trace(old)
    res = read_trace(put(tmp_path, "old.csv", "arrival_s,prompt_len,output_len\n0,8,4\n"))
    assert res.source == "tidy" and list(res.df.columns) == ["arrival_s", "prompt_len", "max_new_tokens"]
    res.df.rename(columns={"max_new_tokens": "output_len"}).to_parquet(tmp_path / "old.parquet")
    pd.testing.assert_frame_equal(read_trace(tmp_path / "old.parquet").df, res.df)
    both = put(tmp_path, "both.csv", "arrival_s,prompt_len,output_len,max_new_tokens\n0,8,4,9\n")
    with pytest.raises(TraceError, match=r"both\.csv:1: tidy trace: both max_new_tokens and its "
                                         r"older name output_len \(columns 3 and 4\): one would "
                                         r"be read, the other ignored; keep one"):
        read_trace(both)
    write_tidy(res.df, tmp_path / "new.csv")
    assert (tmp_path / "new.csv").read_text().splitlines()[0] == "arrival_s,prompt_len,max_new_tokens"


def test_tidy_hash_ids_and_block_size(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 0.1], "prompt_len": [20, 40], "max_new_tokens": [1, 2],
                       "hash_ids": [[0, 1], [0, 1, 2]]})
    write_tidy(df, tmp_path / "h.parquet", hash_block_size=16)
    res = read_trace(tmp_path / "h.parquet")
    assert res.hash_block_size == 16 and res.df.hash_ids.tolist() == [[0, 1], [0, 1, 2]]
    write_tidy(res.df, tmp_path / "h.csv")
    with pytest.raises(TraceError, match=r"h\.csv: hash_ids present .* pass hash_block_size"):
        read_trace(tmp_path / "h.csv")
    back = read_trace(tmp_path / "h.csv", hash_block_size=16)
    pd.testing.assert_frame_equal(back.df, res.df)
    bad = put(tmp_path, "t.csv", 'arrival_s,prompt_len,max_new_tokens,hash_ids\n0,5,5,"[1, -2]"\n')
    with pytest.raises(TraceError, match=r"t\.csv:2: hash_ids: expected a list of integers in "
                                         r"0 \.\. 2\*\*63 - 1, got '\[1, -2\]'"):
        read_trace(bad, hash_block_size=16)


# ---------------------------------------------------------------- bad input

A1 = "2023-11-16 18:17:03.9799600"
A2 = "2023-11-16 18:17:04.0319600"
A3 = "2023-11-16 18:17:05.0000000"


@pytest.mark.parametrize("rows, message", [
    ([f"{A1},5,1", f"{A2},abc,1"],
     "trace.csv:3: ContextTokens: expected an integer >= 1, got 'abc' (1 bad row in all"),
    ([f"{A1},5,-5"], "trace.csv:2: GeneratedTokens: expected an integer >= 1, got '-5'"),
    ([f"{A1},0,3"], "trace.csv:2: ContextTokens: expected an integer >= 1, got '0'"),
    ([f"{A1},2.5,3"], "trace.csv:2: ContextTokens: expected an integer >= 1, got '2.5'"),
    ([f"{A1},5,"], "trace.csv:2: GeneratedTokens: expected an integer >= 1, got ''"),
    ([f"{A1},5,inf"], "trace.csv:2: GeneratedTokens: expected an integer >= 1, got 'inf'"),
    ([f"{A1},5,1", "yesterday,5,1"], "trace.csv:3: TIMESTAMP: expected a date-time like "
                                     "2023-11-16 18:17:03.9799600, got 'yesterday'"),
    ([f"{A1},5,1", f"{A2}+00:00,5,1"], "trace.csv:3: TIMESTAMP: expected a date-time"),
    ([f"{A1},5,1,9"], "trace.csv:2: expected 3 comma-separated fields "
                      "(TIMESTAMP,ContextTokens,GeneratedTokens), got 4"),
    ([f"{A1},5,1", f"{A2},5,1", f"{A3},x,1", f"{A3},y,1"], "trace.csv:4: ContextTokens: "
     "expected an integer >= 1, got 'x' (2 bad rows in all; drop_bad_rows=True drops"),
])
def test_azure_bad_rows_name_file_line_column_value(tmp_path, rows, message):
    with pytest.raises(TraceError) as e:
        read_trace(put(tmp_path, "trace.csv", azure_rows(*rows), crlf=True))
    assert message in str(e.value)


def test_unsorted_names_both_lines_and_is_never_dropped(tmp_path):
    for drop in (False, True):  # without dropping, the bad row 5 would be reported first
        rows = (f"{A1},5,1", f"{A3},5,1", f"{A2},5,1") + (("noon,1,1",) if drop else ())
        path = put(tmp_path, "trace.csv", azure_rows(*rows))
        with pytest.raises(TraceError, match=rf"trace\.csv:4: TIMESTAMP: '{A2}' is earlier than "
                                             rf"'{A3}' at line 3: a trace must be sorted"):
            read_trace(path, drop_bad_rows=drop)


@pytest.mark.parametrize("name, text, message", [
    ("trace.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,5\n",
     "trace.csv:1: azure trace: missing column(s) GeneratedTokens; the header is TIMESTAMP,ContextTokens"),
    ("b.csv", "Timestamp,Model,Request tokens\n1,x,5\n", "b.csv:1: burstgpt trace: missing column(s) "
                                                         "Response tokens"),
    ("v.csv", "arrived_at,num_prefill_tokens\n0,1\n", "v.csv:1: vidur trace: missing column(s) "
                                                      "num_decode_tokens"),
    ("odd.csv", "when,in,out\n0,1,1\n", "odd.csv:1: cannot tell the trace format from the header"),
    ("e.csv", "", "e.csv:1: expected a header line, got an empty file"),
    ("h.csv", "arrival_s,prompt_len,max_new_tokens\r\n", "h.csv: no requests"),
    ("t.csv", "arrival_s,prompt_len,max_new_tokens\n-1,5,5\n", "t.csv:2: arrival_s: expected a number of "
                                                           "seconds >= 0, got '-1'"),
    ("b.csv", f"{BURST_HEADER}\n1,ChatGPT,0,5,5,API log\n", "b.csv:2: Request tokens: expected an "
                                                           "integer >= 1, got '0'"),
    ("b.csv", f"{BURST_HEADER}\n1,ChatGPT,4,0,4,API log\n", "b.csv: no requests left after dropping "
                                                           "{'failed_request': 1}"),
])
def test_csv_errors(tmp_path, name, text, message):
    with pytest.raises(TraceError) as e:
        read_trace(put(tmp_path, name, text), "tidy" if name == "h.csv" else "auto")
    assert message in str(e.value)


@pytest.mark.parametrize("records, message", [
    ([{"timestamp": 0, "input_length": 5, "output_length": 1}, "{not json"],
     "trace.jsonl:2: expected a JSON object, got invalid JSON"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 1}, "[1, 2]"],
     "trace.jsonl:2: expected a JSON object, got a JSON list"),
    ([{"timestamp": 0, "input_length": 5, "output_length": 1}, {"timestamp": 1, "input_length": 5}],
     "trace.jsonl:2: output_length: expected an integer >= 1, got None"),
    ([{"timestamp": 0, "input_length": 5}], "trace.jsonl: mooncake trace: no record has the key(s) "
                                            "output_length"),
    ([{"timestamp": 0, "input_length": 1.5, "output_length": 1}],
     "trace.jsonl:1: input_length: expected an integer >= 1, got 1.5"),
    ([{"timestamp": 0, "input_length": True, "output_length": 1}],
     "trace.jsonl:1: input_length: expected an integer >= 1, got True"),
    ([{"timestamp": -4, "input_length": 3, "output_length": 1}],
     "trace.jsonl:1: timestamp: expected a number >= 0 (in ms), got -4"),
    ([{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [0, "a"]}],
     "trace.jsonl:1: hash_ids: expected a list of integers in 0 .. 2**63 - 1, got [0, 'a']"),
    ([{"timestamp": 9, "input_length": 3, "output_length": 1}, {"timestamp": 2, "input_length": 3,
                                                                "output_length": 1}],
     "trace.jsonl:2: timestamp: 2 is earlier than 9 at line 1"),
])
def test_jsonl_errors(tmp_path, records, message):
    with pytest.raises(TraceError) as e:
        read_trace(jsonl(tmp_path, records))
    assert message in str(e.value)


@pytest.mark.parametrize("name, text, message", [
    ("t.csv", "arrival_s,prompt_len,prompt_len,max_new_tokens\n0,5,6,4\n",
     "t.csv:1: tidy trace: prompt_len is named twice (columns 2 and 3): one would be read, the "
     "other ignored; keep one"),
    ("a.csv", f"{AZURE_HEADER},GeneratedTokens,GeneratedTokens\n{A1},5,1,2,3\n",
     "a.csv:1: azure trace: GeneratedTokens is named 3 times (columns 3, 4 and 5)"),
    ("h.csv", "arrival_s,prompt_len,max_new_tokens,hash_ids,hash_ids\n0,5,1,[1],[2]\n",
     "h.csv:1: tidy trace: hash_ids is named twice (columns 4 and 5)"),
])
def test_a_column_read_twice_is_refused(tmp_path, name, text, message):
    """One of the two would be read and the other silently ignored."""
    with pytest.raises(TraceError) as e:
        read_trace(put(tmp_path, name, text), hash_block_size=16, drop_bad_rows=True)
    assert message in str(e.value)


def test_a_parquet_column_read_twice_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table([[0.0, 1.0], [0.0, 2.0], [3, 3], [1, 1]],
                            names=["arrival_s", "arrival_s", "prompt_len", "max_new_tokens"]),
                   tmp_path / "t.parquet")  # it used to end in an IndexError
    with pytest.raises(TraceError, match=r"t\.parquet: arrival_s is named twice \(columns 1 "
                                         r"and 2\): one would be read, the other ignored"):
        read_trace(tmp_path / "t.parquet")
    pq.write_table(pa.table([[0.0], [3], [1], [2]], names=["arrival_s", "prompt_len",
                                                           "max_new_tokens", "output_len"]),
                   tmp_path / "both.parquet")
    with pytest.raises(TraceError, match=r"both\.parquet: both max_new_tokens and its older "
                                         r"name output_len \(columns 3 and 4\)"):
        read_trace(tmp_path / "both.parquet")
    frame = pd.DataFrame([[0.0, 3, 1, 2]], columns=["arrival_s", "prompt_len", "max_new_tokens",
                                                    "max_new_tokens"])
    with pytest.raises(TraceError, match=r"trace: max_new_tokens is named twice"):
        check_trace(frame)


@pytest.mark.parametrize("count", [2**53 - 1, 2**53, 2**53 + 1])
def test_a_count_of_2_to_the_53_or_more_is_too_large(tmp_path, count):
    """2**53 + 1 parses as 2**53 through float64: every count from 2**53 up is refused, so
    none is read rounded."""
    paths = {put(tmp_path, "t.csv", f"arrival_s,prompt_len,max_new_tokens\n0,5,1\n1,{count},1\n"):
             "t.csv:3: prompt_len: '{}'",
             jsonl(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 1},
                              {"timestamp": 1, "input_length": count, "output_length": 1}]):
             "trace.jsonl:2: input_length: {}"}
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": np.array([5, count], np.int64),
                  "max_new_tokens": [1, 1]}).to_parquet(tmp_path / "t.parquet")
    paths[tmp_path / "t.parquet"] = "t.parquet: row 2: prompt_len: {}"
    for path, where in paths.items():
        if count < 2**53:
            assert read_trace(path).df.prompt_len.tolist() == [5, count]
            continue
        with pytest.raises(TraceError) as e:
            read_trace(path)
        assert str(e.value).startswith(f"{tmp_path / where.format(count)} is too large: "
                                       f"expected an integer >= 1, at most 2**53 - 1 = "
                                       f"9007199254740991")
        res = read_trace(path, drop_bad_rows=True)
        assert res.dropped == {"too_large": 1} and res.df.prompt_len.tolist() == [5]


def test_a_jsonl_record_giving_a_key_twice_is_a_bad_line(tmp_path):
    """json.loads keeps the last of the two: the record would be read as something else."""
    good = {"timestamp": 0, "input_length": 5, "output_length": 1}
    path = jsonl(tmp_path, [good, '{"timestamp": 0, "timestamp": 5, "input_length": 3, '
                                  '"output_length": 1}',
                            '{"timestamp": 9, "input_length": 3, "output_length": 1, '
                            '"meta": {"a": 1, "a": 2}}'])
    with pytest.raises(TraceError, match=r"trace\.jsonl:2: expected a JSON object, got one "
                                         r"giving the key 'timestamp' twice \(2 bad rows in all"):
        read_trace(path)
    res = read_trace(path, drop_bad_rows=True)
    assert res.dropped == {"malformed_line": 2} and len(res.df) == 1


@pytest.mark.parametrize("record, message", [
    ({"timestamp": 0, "input_length": "10", "output_length": 1},
     "trace.jsonl:2: input_length: expected an integer >= 1, got '10'"),
    ({"timestamp": "5", "input_length": 10, "output_length": 1},
     "trace.jsonl:2: timestamp: expected a number >= 0 (in ms), got '5'"),
    ({"timestamp": 0, "input_length": 10, "output_length": ""},
     "trace.jsonl:2: output_length: expected an integer >= 1, got ''"),
])
def test_a_json_string_is_not_a_number(tmp_path, record, message):
    path = jsonl(tmp_path, [{"timestamp": 0, "input_length": 5, "output_length": 1}, record])
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert message in str(e.value)
    assert read_trace(path, drop_bad_rows=True).dropped == {"not_a_number": 1}


def test_a_parquet_string_is_not_a_number(tmp_path):
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": ["5", "10"],
                  "max_new_tokens": [1, 1]}).to_parquet(tmp_path / "s.parquet")
    with pytest.raises(TraceError, match=r"s\.parquet: row 1: prompt_len: expected an integer "
                                         r">= 1, got '5' \(2 bad rows in all"):
        read_trace(tmp_path / "s.parquet")


@pytest.mark.parametrize("field, column", [("\u0663", "prompt_len"), ("\uff11\uff10", "prompt_len"),
                                           ("1_000", "prompt_len"), ("\u0660.5", "arrival_s")])
def test_only_ascii_digits_are_numbers(tmp_path, field, column):
    """float() reads Arabic-Indic '٣', full-width '１０' and '1_000'; a trace's number is
    ASCII digits only."""
    line = f"1,{field},2" if column == "prompt_len" else f"{field},3,2"
    path = put(tmp_path, "t.csv", f"arrival_s,prompt_len,max_new_tokens\n0,5,1\n{line}\n")
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert f"t.csv:3: {column}: expected " in str(e.value) and repr(field) in str(e.value)
    res = read_trace(path, drop_bad_rows=True)
    assert res.dropped == {"not_a_number": 1} and res.df.prompt_len.tolist() == [5]


def test_an_azure_zone_in_other_digits_does_not_set_the_files_style(tmp_path):
    """The first value's zone decides the file's style; '+٠٠:٠٠' is no zone."""
    path = put(tmp_path, "trace.csv", azure_rows(f"{A1}+\u0660\u0660:\u0660\u0660,5,1",
                                                 f"{A2},7,2", f"{A3},9,3"))
    res = read_trace(path, drop_bad_rows=True)
    assert res.dropped == {"bad_timestamp": 1} and res.df.prompt_len.tolist() == [7, 9]


def test_parquet_errors_name_the_row(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": [5, 0], "max_new_tokens": [1, 1]})
    df.to_parquet(tmp_path / "t.parquet")
    with pytest.raises(TraceError, match=r"t\.parquet: row 2: prompt_len: expected an integer >= 1, got 0"):
        read_trace(tmp_path / "t.parquet")
    df.drop(columns="max_new_tokens").to_parquet(tmp_path / "m.parquet")
    with pytest.raises(TraceError, match=r"m\.parquet: missing column\(s\) max_new_tokens"):
        read_trace(tmp_path / "m.parquet", drop_bad_rows=True)
    with pytest.raises(TraceError, match="read as a tidy trace, not azure"):
        read_trace(tmp_path / "t.parquet", "azure")


def test_unreadable_files(tmp_path):
    (tmp_path / "latin.csv").write_bytes(f"{AZURE_HEADER}\n{A1},5,1\n\xe9,5,1\n".encode("latin-1"))
    with pytest.raises(TraceError, match=r"latin\.csv:3: expected UTF-8 text, got the byte 0xe9"):
        read_trace(tmp_path / "latin.csv")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceError, match=r"junk\.parquet: not a readable Parquet file"):
        read_trace(tmp_path / "junk.parquet")
    with pytest.raises(TraceError, match=r"absent\.csv: no such file"):
        read_trace(tmp_path / "absent.csv")


def test_parquet_nullable_and_float_columns(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "prompt_len": pd.array([5, None, 7], dtype="Int64"),
                       "max_new_tokens": [1.0, 2.0, 3.0]})
    df.to_parquet(tmp_path / "n.parquet")
    with pytest.raises(TraceError, match=r"n\.parquet: row 2: prompt_len: expected an integer >= 1, "
                                         r"got nan"):
        read_trace(tmp_path / "n.parquet")
    res = read_trace(tmp_path / "n.parquet", drop_bad_rows=True)
    assert res.dropped == {"missing_value": 1} and res.df.max_new_tokens.tolist() == [1, 3]


def test_bad_options():
    with pytest.raises(TraceError, match="unknown trace format 'csv'"):
        read_trace("x.csv", "csv")
    with pytest.raises(TraceError, match="time_unit: expected auto, ms or s, got 'us'"):
        read_trace("x.jsonl", time_unit="us")
    with pytest.raises(TraceError, match=r"hash_block_size: expected an integer in 1 \.\. 1073741824, got 0"):
        read_trace("x.jsonl", hash_block_size=0)


def test_drop_bad_rows_counts_every_reason(tmp_path):
    path = put(tmp_path, "trace.csv", azure_rows(
        f"{A1},5,1", f"{A1},abc,1", f"{A1},,1", f"{A1},2.5,1", f"{A1},-3,1", f"{A1},0,1",
        "noon,5,1", f"{A1},5", f"{A2},7,2", f"{A3},9,3"))
    res = read_trace(path, drop_bad_rows=True)
    assert res.dropped == {"malformed_line": 1, "missing_value": 1, "not_a_number": 1,
                           "not_an_integer": 1, "negative": 1, "zero_length": 1, "bad_timestamp": 1}
    assert res.df.prompt_len.tolist() == [5, 7, 9]
    assert res.df.arrival_s.tolist() == pytest.approx([0.0, 0.052, 1.02004])
    assert set(res.dropped) <= set(DROP_REASONS)


def test_drop_bad_rows_in_jsonl_and_burstgpt(tmp_path):
    res = read_trace(jsonl(tmp_path, [
        {"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}, "oops",
        {"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "x"},
        {"timestamp": 2, "input_length": 5, "output_length": 1}]), drop_bad_rows=True)
    assert res.dropped == {"malformed_line": 1, "bad_hash_ids": 1, "missing_value": 1}
    assert len(res.df) == 1
    res = read_trace(put(tmp_path, "b.csv", "\n".join([
        BURST_HEADER, "1,ChatGPT,4,0,4,API log", "2,ChatGPT,x,3,4,API log", "3,GPT-4,4,3,7,API log"])),
        drop_bad_rows=True)
    assert res.dropped == {"failed_request": 1, "not_a_number": 1} and len(res.df) == 1


# ---------------------------------------------------------------- writers

def test_mooncake_export_round_trips(tmp_path):
    src = jsonl(tmp_path, [
        {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 1234, "input_length": 600, "output_length": 4, "hash_ids": [0, 2]}], "src.jsonl")
    res = read_trace(src)
    write_mooncake(res.df, tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text() == src.read_text()
    back = read_trace(tmp_path / "out.jsonl")
    pd.testing.assert_frame_equal(back.df, res.df)
    assert back.hash_block_size == 512


def test_mooncake_export_of_bailian_and_of_sub_ms_arrivals(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 0.0004, 0.0123456, 7.25], "prompt_len": [1, 512, 513, 1500],
                       "max_new_tokens": [3, 2, 1, 9]})
    write_mooncake(df, tmp_path / "a.jsonl", hash_block_size=512)
    back = read_trace(tmp_path / "a.jsonl")
    assert np.abs(back.df.arrival_s - df.arrival_s).max() <= 0.0005  # whole ms, as Mooncake's
    assert back.df[["prompt_len", "max_new_tokens"]].equals(df[["prompt_len", "max_new_tokens"]])
    ids = back.df.hash_ids.tolist()
    assert [len(h) for h in ids] == [1, 1, 2, 3]  # ceil(prompt_len / 512), none shared
    assert len({h for row in ids for h in row}) == 7
    bailian = df.assign(hash_ids=[[0], [0, 1], [2], [3, 4]])
    bailian.attrs["hash_block_size"] = 16
    with pytest.raises(TraceError, match="hash_ids name 16-token blocks"):
        write_mooncake(bailian, tmp_path / "b.jsonl", hash_block_size=512)
    write_mooncake(bailian, tmp_path / "b.jsonl")
    back = read_trace(tmp_path / "b.jsonl", hash_block_size=16)
    assert back.df.hash_ids.tolist() == bailian.hash_ids.tolist() and back.hash_block_size == 16


def test_a_timestamp_beyond_a_double_in_ms_is_refused_not_an_overflow(tmp_path):
    """1e307 s is 1e310 ms: beyond a double, once an OverflowError; the tidy writers take it."""
    df = pd.DataFrame({"arrival_s": [0.0, 1e300, 1e307], "prompt_len": [5, 5, 5],
                       "max_new_tokens": [1, 1, 1]})
    with pytest.raises(TraceError, match=r"out\.jsonl: row 3: arrival_s: 1e\+307 is too large "
                                         r"for a timestamp in ms: at most 1\.798e\+305 s"):
        write_mooncake(df, tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
    write_mooncake(df.iloc[:2], tmp_path / "out.jsonl")
    assert read_trace(tmp_path / "out.jsonl").df.arrival_s.tolist() == [0.0, 1e300]
    for name in ("out.csv", "out.parquet"):
        write_tidy(df, tmp_path / name)
        pd.testing.assert_frame_equal(read_trace(tmp_path / name).df, df)


def test_writers_refuse_bad_frames(tmp_path):
    df = pd.DataFrame({"arrival_s": [0.0, 1.0, 0.5], "prompt_len": [5, 5, 5], "max_new_tokens": [1, 1, 1]})
    with pytest.raises(TraceError, match=r"out\.csv: row 3: arrival_s: 0\.5 is earlier than 1\.0 at row 2"):
        write_tidy(df, tmp_path / "out.csv")
    with pytest.raises(TraceError, match=r"row 2: max_new_tokens: expected an integer >= 1, got 0"):
        check_trace(df.assign(max_new_tokens=[1, 0, 1]))
    with pytest.raises(TraceError, match="missing column"):
        write_mooncake(df.drop(columns="prompt_len"), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.jsonl").exists()


# ---------------------------------------------------------------- generators

LEN = dict(prompt=fixed(10), output=fixed(2))


@pytest.mark.parametrize("arrival, burstiness", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 1.0),
                                                 ("gamma", 4.0)])
def test_arrival_rate_and_burstiness(arrival, burstiness):
    df = generate(40_000, 20.0, arrival, burstiness, **LEN, arrival_seed=3)
    s = trace_stats(df)
    assert df.arrival_s.iloc[0] == 0.0 and s["requests"] == 40_000
    assert s["mean_rate"] == pytest.approx(20.0, rel=0.04)
    assert s["interarrival_cv"] ** 2 == pytest.approx(1 / burstiness, rel=0.1)  # shape = burstiness


def test_constant_rate_and_duration():
    df = generate(5, 4.0, "constant", **LEN)
    assert df.arrival_s.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert len(generate(None, 4.0, "constant", duration_s=2.0, **LEN)) == 8
    d = generate(rate=50.0, duration_s=100.0, **LEN)
    assert d.arrival_s.max() < 100.0 and len(d) == pytest.approx(5000, rel=0.06)
    assert len(generate(10, 50.0, duration_s=100.0, **LEN)) == 10
    assert generate(4, float("inf"), **LEN).arrival_s.tolist() == [0.0] * 4


def test_seeds_are_separate_and_reproducible():
    kw = dict(prompt=uniform(1, 1000), output=lognormal(median=50, sigma=1.0))
    a = generate(500, 5.0, "gamma", 0.5, **kw, arrival_seed=1, length_seed=1)
    pd.testing.assert_frame_equal(a, generate(500, 5.0, "gamma", 0.5, **kw, arrival_seed=1, length_seed=1))
    b = generate(500, 5.0, "gamma", 0.5, **kw, arrival_seed=1, length_seed=2)
    c = generate(500, 5.0, "gamma", 0.5, **kw, arrival_seed=2, length_seed=1)
    assert a.arrival_s.equals(b.arrival_s) and not a.prompt_len.equals(b.prompt_len)
    assert a[["prompt_len", "max_new_tokens"]].equals(c[["prompt_len", "max_new_tokens"]])
    assert not a.arrival_s.equals(c.arrival_s)
    # lengths do not depend on the arrival process either
    d = generate(500, 99.0, "constant", **kw, length_seed=1)
    assert a[["prompt_len", "max_new_tokens"]].equals(d[["prompt_len", "max_new_tokens"]])


def test_length_distributions_and_bounds():
    rng = np.random.default_rng(0)
    assert set(fixed(7).sample(100, rng)) == {7}
    u = uniform(3, 6).sample(2000, rng)
    assert u.min() == 3 and u.max() == 6
    ln = lognormal(median=200, sigma=1.5, lo=10, hi=1000).sample(20_000, rng)
    assert ln.min() >= 10 and ln.max() <= 1000 and ln.dtype == np.int64
    assert np.median(ln) == pytest.approx(200, rel=0.05)
    assert lognormal(mean=300, sigma=0.5).sample(50_000, rng).mean() == pytest.approx(300, rel=0.02)
    s = sampled_from(pd.Series([5, 9, 9, 100])).sample(1000, rng)
    assert set(s) == {5, 9, 100}


@pytest.mark.parametrize("call, message", [
    (lambda: generate(10, 0.0, **LEN), "rate: expected a number of requests/s > 0, got 0.0"),
    (lambda: generate(10, -1, **LEN), "rate: expected"),
    (lambda: generate(10, 1.0, "bursty", **LEN), "arrival: expected one of poisson, gamma, constant"),
    (lambda: generate(10, 1.0, "poisson", 0.5, **LEN), "burstiness=0.5 needs arrival='gamma'"),
    (lambda: generate(10, 1.0, "gamma", 0, **LEN), "burstiness: expected a number > 0, got 0"),
    (lambda: generate(rate=1.0, **LEN), "give n, duration_s or both"),
    (lambda: generate(0, 1.0, **LEN), "n: expected an integer in 1..1000000000, got 0"),
    (lambda: generate(rate=float("inf"), duration_s=5, **LEN), "rate=inf puts every request at 0.0"),
    (lambda: generate(3, 1.0, prompt=10, output=fixed(1)), "prompt: expected a LengthDist"),
    (lambda: uniform(5, 2), "expected lo <= hi, got 5 > 2"),
    (lambda: uniform(0, 2), "uniform(lo): expected an integer in 1..1073741823, got 0"),
    (lambda: fixed(2.5), "fixed(value): expected an integer in 1..1073741823, got 2.5"),
    (lambda: lognormal(median=5, mean=5, sigma=1), "exactly one of median and mean"),
    (lambda: lognormal(median=-5, sigma=1), "median/mean must be a number in (0, 1073741823]"),
    (lambda: lognormal(median=5, sigma=-1), "sigma must be a number >= 0"),
    (lambda: fixed(2 ** 30), "fixed(value): expected an integer in 1..1073741823, got 1073741824"),
    (lambda: sampled_from([]), "non-empty"),
    (lambda: sampled_from([3, 0]), "integer lengths >= 1"),
])
def test_generator_parameter_errors(call, message):
    with pytest.raises(TraceError) as e:
        call()
    assert message in str(e.value)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 200), rate=st.floats(0.01, 1e4), arrival=st.sampled_from(["poisson", "gamma", "constant"]),
       burst=st.floats(0.05, 20), seed=st.integers(0, 2**32 - 1))
def test_generated_traces_are_valid_and_round_trip(tmp_path_factory, n, rate, arrival, burst, seed):
    df = generate(n, rate, arrival, burst if arrival == "gamma" else 1.0, prompt=uniform(1, 50),
                  output=lognormal(median=20, sigma=2, hi=4096), arrival_seed=seed, length_seed=seed)
    check_trace(df)
    path = tmp_path_factory.mktemp("gen") / "g.csv"
    write_tidy(df, path)
    pd.testing.assert_frame_equal(read_trace(path).df, df)


# ---------------------------------------------------------------- commands

def test_trace_commands(tmp_path, capsys):
    src = put(tmp_path, "a.csv", azure_rows(f"{A1},5,1", f"{A2},7,2", f"{A3},9,3"), crlf=True)
    assert run(["trace", "convert", str(src), str(tmp_path / "a.jsonl")]) == 0
    assert "3 requests from" in capsys.readouterr().out
    assert read_trace(tmp_path / "a.jsonl").df.prompt_len.tolist() == [5, 7, 9]
    assert run(["trace", "convert", str(src), str(tmp_path / "a.parquet"), "--to", "tidy"]) == 0
    assert run(["trace", "stats", str(tmp_path / "a.parquet")]) == 0
    out = capsys.readouterr().out
    assert "requests            3" in out and "duration_s          1.02" in out
    assert "prompt_len          7.0      7.0" in out and "max_new_tokens      2.0" in out


def test_trace_commands_on_bailian_hashes(tmp_path, capsys):
    src = jsonl(tmp_path, [{"chat_id": 1, "timestamp": 1.5, "input_length": 40, "output_length": 5,
                            "hash_ids": [1, 2, 3]},
                           {"chat_id": 2, "timestamp": 2.0, "input_length": 9, "output_length": 2,
                            "hash_ids": [4]}])
    assert run(["trace", "stats", str(src)]) == 0
    out = capsys.readouterr().out
    assert "(mooncake, timestamps in s)" in out and "hash block (tokens) 16" in out
    assert run(["trace", "convert", str(src), str(tmp_path / "m.jsonl")]) == 0
    assert "read back with --hash-block-size 16" in capsys.readouterr().out
    back = read_trace(tmp_path / "m.jsonl", hash_block_size=16)
    assert back.df.arrival_s.tolist() == [0.0, 0.5] and back.df.hash_ids.tolist() == [[1, 2, 3], [4]]


def test_trace_commands_bad_input(tmp_path, capsys):
    bad = put(tmp_path, "bad.csv", azure_rows(f"{A1},5,1", f"{A2},x,2"))
    assert run(["trace", "stats", str(bad)]) == 2
    assert "steptrace: error: " in capsys.readouterr().err
    assert run(["trace", "stats", str(bad), "--drop-bad-rows"]) == 0
    assert "not_a_number 1" in capsys.readouterr().out
    assert run(["trace", "stats", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv" in capsys.readouterr().err


# ---------------------------------------------------------------- the real Azure trace

def test_real_azure_trace_keeps_every_request(tmp_path):
    res = read_trace(AZURE)
    df = res.df
    assert res.source == "azure" and res.dropped == {} and len(df) == 8819
    assert df.arrival_s.iloc[0] == 0.0 and df.arrival_s.iloc[-1] == pytest.approx(3435.95, abs=0.01)
    assert df.arrival_s.diff().iloc[1:].min() > 0  # strictly increasing, as the README says
    assert (df.prompt_len.min(), df.prompt_len.max()) == (3, 7437)
    assert (df.max_new_tokens.min(), df.max_new_tokens.max()) == (6, 1899)
    write_tidy(df, tmp_path / "azure.csv")  # exact round trip through the tidy CSV
    pd.testing.assert_frame_equal(read_trace(tmp_path / "azure.csv").df, df)
    assert math.isclose(trace_stats(df)["mean_rate"], 8818 / df.arrival_s.iloc[-1])


def test_real_azure_trace_is_the_published_file():
    assert read_trace(AZURE).sha256 == AZURE_SHA256 == hashlib.sha256(AZURE.read_bytes()).hexdigest()
    assert AZURE_SHA256 in (AZURE.parent / "README.md").read_text()  # the attribution's checksum
