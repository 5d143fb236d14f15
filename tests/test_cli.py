"""steptrace's command line: the scheduler replay and its bad-input errors."""

from pathlib import Path


from harness.cli import DEFAULT_TRACE, main

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


def test_bad_trace_names_file_and_line(tmp_path, capsys):
    path = write(tmp_path, "arrival_s,prompt_len,output_len\n0,1,1\n0.5,x,1\n")
    assert main(["replay-scheduler", str(path)]) == 2
    assert "trace.csv:3: prompt_len: expected an integer >= 1, got 'x'" in capsys.readouterr().err


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
