"""The npu-smi parser and source, on outputs transcribed from Huawei's documentation
(tests/fixtures/npu_smi/README.md says which page each one comes from)."""

import os
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.telemetry import Sampler, npu_smi
from harness.telemetry.npu_smi import (
    MIB,
    NpuSmiError,
    NpuSmiSource,
    fields,
    npu_id,
    parse,
    run_npu_smi,
)
from tests.helpers import wait_for_samples

FIXTURES = Path(__file__).parent / "fixtures" / "npu_smi"


def fixture(name):
    return (FIXTURES / name).read_text()


def chip(name):
    chips = parse(fixture(name))
    assert len(chips) == 1
    return fields(chips[0])


FIELDS = ("util_pct", "aicore_pct", "mem_used_pct", "mem_capacity_mib", "mem_bw_util_pct",
          "mem_clock_mhz")


@pytest.mark.parametrize("name, expected", [
    ("usages_atlas350.txt",          (0,    0,    3,    131072, 3,    None)),
    ("memory_atlas350.txt",          (None, None, None, 131072, None, 3200)),
    # npu-smi 23.0.5: no NPU Utilization yet; DDR fields beside the HBM ones
    ("usages_atlas800_npusmi23.txt", (None, 0,    0,    32768,  0,    None)),
    # an NPU on the SoC's DDR: "Memory ..." where the others print "HBM ..."
    ("usages_atlas200i_a2.txt",      (None, 0,    35,   10810,  0,    None)),
    ("memory_atlas200i_a2_chip.txt", (None, None, None, 10810,  None, 2131)),
])
def test_documented_outputs_parse_through_the_aliases(name, expected):
    values, unknown = chip(name)
    assert values == dict(zip(FIELDS, expected))
    assert unknown == []


def test_unknown_missing_and_na_fields():
    values, unknown = chip("usages_edited_unknown_missing.txt")
    assert values["util_pct"] is None         # printed as NA
    assert values["mem_bw_util_pct"] is None  # line removed
    assert (values["aicore_pct"], values["mem_used_pct"]) == (61, 25)
    assert unknown == ["L2 Cache Usage Rate(%)"]


def test_chip_id_before_or_after_the_fields_splits_the_same_chips():
    trailing = ("NPU ID : 3\nChip Count : 2\n\nHBM Usage Rate(%) : 10\nChip ID : 0\n"
                "HBM Usage Rate(%) : 20\nChip ID : 1\n")
    leading = ("NPU ID : 3\nChip Count : 2\n\nChip ID : 0\nHBM Usage Rate(%) : 10\n\n"
               "Chip ID : 1\nHBM Usage Rate(%) : 20\n")
    expected = [{"Chip ID": "0", "HBM Usage Rate(%)": "10"},
                {"Chip ID": "1", "HBM Usage Rate(%)": "20"}]
    assert parse(trailing) == expected
    assert parse(leading) == expected
    assert parse("Total Capacity(MB) : 12288\nPCIe Bus Info : 0000:61:00.0\n") == [
        {"Total Capacity(MB)": "12288", "PCIe Bus Info": "0000:61:00.0"}]


def fake_run(usages, memory, calls=None):
    def run(query, npu):
        if calls is not None:
            calls.append((query, npu))
        return fixture({"usages": usages, "memory": memory}[query])
    return run


def clock():
    return 7.25


def test_source_joins_usages_and_memory_into_one_row():
    calls = []
    source = NpuSmiSource([0, 1], 0.1, clock, env={},
                          run=fake_run("usages_atlas350.txt", "memory_atlas350.txt", calls))
    assert source.period_s == 1.0  # npu-smi at <= 1 Hz
    rows = source.sample()
    assert [(r["t_s"], r["source"], r["device"]) for r in rows] == [(7.25, "npu-smi", 0),
                                                                   (7.25, "npu-smi", 1)]
    r = rows[0]
    assert r["util_pct"] == 0 and r["aicore_pct"] == 0 and r["mem_bw_util_pct"] == 3
    assert r["mem_total_bytes"] == 131072 * MIB
    assert r["mem_used_bytes"] == round(0.03 * 131072 * MIB)
    assert r["mem_clock_mhz"] == 3200
    assert r["util_window_s"] is None and r["power_w"] is None and r["energy_j"] is None
    assert calls == [("usages", 0), ("memory", 0), ("usages", 1), ("memory", 1)]
    assert "npu-smi.fields" not in source.notes


def test_renamed_fields_fill_the_same_columns():
    source = NpuSmiSource([0], 1.0, clock, env={},
                          run=fake_run("usages_atlas200i_a2.txt", "memory_atlas200i_a2_chip.txt"))
    r = source.sample()[0]
    assert r["util_pct"] is None  # this npu-smi has no NPU Utilization
    assert r["mem_total_bytes"] == 10810 * MIB
    assert r["mem_used_bytes"] == round(0.35 * 10810 * MIB)
    assert (r["mem_bw_util_pct"], r["mem_clock_mhz"]) == (0, 2131)


def test_unknown_fields_are_noted_and_missing_ones_are_null():
    source = NpuSmiSource([0], 1.0, clock, env={},
                          run=fake_run("usages_edited_unknown_missing.txt", "memory_atlas350.txt"))
    r = source.sample()[0]
    assert r["util_pct"] is None and r["mem_bw_util_pct"] is None
    assert r["aicore_pct"] == 61 and r["mem_used_bytes"] == round(0.25 * 131072 * MIB)
    assert source.notes["npu-smi.fields"] == "not recognised, ignored: L2 Cache Usage Rate(%)"


def test_a_failing_query_gives_a_null_row_and_a_note():
    def run(query, npu):
        raise NpuSmiError("`npu-smi info -t usages -i 0` exited with 255: device busy")
    r = NpuSmiSource([0], 1.0, clock, env={}, run=run).sample()
    assert len(r) == 1 and r[0]["device"] == 0
    assert all(v is None for k, v in r[0].items() if k not in ("t_s", "source", "device"))


def test_ascend_rt_visible_devices_picks_the_npu_id():
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,6"}
    assert (npu_id(0, env), npu_id(1, env), npu_id(1, {})) == (4, 6, 1)
    calls = []
    source = NpuSmiSource([1, 2], 1.0, clock, env=env,
                          run=fake_run("usages_atlas350.txt", "memory_atlas350.txt", calls))
    source.sample()
    assert {npu for _, npu in calls} == {6}
    assert source.notes["npu-smi.npu2"].startswith("not sampled: NPU device 2 is not in")


def fake_npu_smi(directory, body):
    """An `npu-smi` executable: a Python script whose body sees the argv list `args`."""
    path = Path(directory) / "npu-smi"
    path.write_text(f"#!{sys.executable}\nimport sys, time\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_run_npu_smi_reports_exit_codes_and_timeouts(tmp_path, monkeypatch):
    exe = fake_npu_smi(tmp_path, "print('npu-smi: device 9 not found', file=sys.stderr)\n"
                                 "sys.exit(2)")
    with pytest.raises(NpuSmiError, match=r"`npu-smi info -t usages -i 9` exited with 2: "
                                          r"npu-smi: device 9 not found"):
        run_npu_smi(str(exe), "usages", 9)
    exe = fake_npu_smi(tmp_path, "time.sleep(5)")
    monkeypatch.setattr(npu_smi, "TIMEOUT_S", 0.2)
    with pytest.raises(NpuSmiError, match="timed out after 0.2 s"):
        run_npu_smi(str(exe), "memory", 0)


def test_without_npu_smi_on_path_the_source_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    source = NpuSmiSource([0], 1.0, clock)
    assert source.sample() == []
    assert source.notes == {"npu-smi": "unavailable: npu-smi not found on PATH"}


def test_sampler_runs_npu_smi_in_its_process(tmp_path, monkeypatch):
    outputs = {"usages": str(FIXTURES / "usages_atlas350.txt"),
               "memory": str(FIXTURES / "memory_atlas350.txt")}
    fake_npu_smi(tmp_path, f"print(open({outputs!r}[args[2]]).read(), end='')")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    t0 = time.perf_counter()
    sampler = Sampler("npu", [0], 0.1, t0, os.getpid())
    sampler.start()
    time.sleep(0.6)
    frame, notes = sampler.stop()
    npu = frame[frame["source"] == "npu-smi"]
    assert len(npu) >= 1 and (npu["device"] == 0).all()
    assert (npu["mem_total_bytes"] == 131072 * MIB).all() and (npu["mem_clock_mhz"] == 3200).all()
    assert (frame["source"] == "cpu").sum() >= 3
    assert notes["npu-smi"] == "usages and memory every 1 s"


def test_a_hung_npu_smi_costs_the_rest_of_the_run_not_the_run(tmp_path, monkeypatch):
    fake_npu_smi(tmp_path, f"open({str(tmp_path / 'pid')!r}, 'w').write(str(__import__('os')"
                           ".getpid())); time.sleep(30)")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = Sampler("npu", [0], 0.1, time.perf_counter(), os.getpid())
    sampler.start()
    wait_for_samples(sampler, 3)
    while not (tmp_path / "pid").exists():  # npu-smi is hung in its first call
        time.sleep(0.05)
    began = time.perf_counter()
    frame, notes = sampler.stop()
    assert time.perf_counter() - began < 0.1 + 1.0
    assert notes["sampler"] == "child did not stop within 0.6 s; killed, rows up to then kept"
    assert (frame["source"] == "cpu").sum() >= 3  # the CPU thread was not held up
    hung = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 2
    while _alive(hung) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(hung), "the killed sampler's npu-smi call must go with it"


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
