"""steptrace's command line: the scheduler replay and its bad-input errors."""

from pathlib import Path

import pytest

from harness.cli import DEFAULT_TRACE, main
from harness.sched_replay import read_tidy_csv

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_replay_scheduler_on_the_bundled_trace(capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the README's commands run from the repository root
    assert main(["replay-scheduler", "--set", "overlap=true", "--set", "num_mtp=1"]) == 0
    out = capsys.readouterr().out
    assert "400 requests" in out
    assert "finished / rejected            400 / 0       400 / 0" in out
    assert "plans identical: yes" in out


def test_replay_reports_rejections(tmp_path, capsys):
    path = write(tmp_path, "arrival_s,prompt_len,output_len\n0,8,4\n0.5,5000,10\n1.0,3,3\n")
    assert main(["replay-scheduler", str(path), "--set", "num_kv_blocks=64"]) == 0
    assert "2 / 1" in capsys.readouterr().out  # 2 finished, the 5000-token prompt rejected


@pytest.mark.parametrize("text, words", [
    ("time,prompt,output\n0,1,1\n", "trace.csv:1: expected the header arrival_s,prompt_len,output_len"),
    ("arrival_s,prompt_len,output_len\n0,1,1\n0.5,x,1\n", "trace.csv:3: expected a number and two integers"),
    ("arrival_s,prompt_len,output_len\n0,1\n", "trace.csv:2: expected 3 values, got 2"),
    ("arrival_s,prompt_len,output_len\n0,0,1\n", "trace.csv:2: arrival_s must be >= 0 and lengths >= 1"),
    ("arrival_s,prompt_len,output_len\n1,1,1\n0.5,1,1\n", "trace.csv:3: arrival_s 0.5 is before"),
    ("arrival_s,prompt_len,output_len\n", "no requests"),
])
def test_bad_trace_names_file_and_line(tmp_path, text, words):
    with pytest.raises(ValueError, match=words):
        read_tidy_csv(write(tmp_path, text))


def test_bad_input_exits_2(tmp_path, capsys, monkeypatch):
    assert main(["replay-scheduler", str(tmp_path / "missing.csv")]) == 2
    assert "No such file" in capsys.readouterr().err
    assert main(["replay-scheduler", "--set", "block_size=0"]) == 2
    assert "block_size must be >= 1, got 0" in capsys.readouterr().err
    assert main(["replay-scheduler", "--set", "nonsense"]) == 2
    assert "FIELD one of max_num_batched_tokens, max_num_seqs" in capsys.readouterr().err
    assert main(["replay-scheduler", "--step-ms", "0"]) == 2
    assert "--step-ms must be > 0, got 0" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert main(["replay-scheduler"]) == 2
    assert f"the bundled {DEFAULT_TRACE} is not under the current directory" in capsys.readouterr().err
