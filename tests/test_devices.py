"""Device profiles: the doc's figures, their labels, and the loader's errors."""

import os

import pytest
import yaml

from engine.devices import PRECISIONS, known_profiles, load_device_profile
from engine.devices.profile import DEVICES_DIR
from tests.helpers import within

# docs/design/hardware_and_models.md §1: bf16, fp8, fp4, int8 TFLOP/s; HBM GB, TB/s;
# interconnect GB/s; TDP W
DOC = {
    "H100": (989, 1979, None, 1979, 80, 3.35, 900, 700),
    "H200": (989, 1979, None, 1979, 141, 4.8, 900, 700),
    "H800": (989, 1979, None, 1979, 80, 3.35, 400, 700),
    "B200": (2250, 4500, 9000, 4500, 180, 8, 1800, 1000),
    "GB200": (2500, 5000, 10000, None, 186, 8, 1800, 1200),
    "B300": (2250, 4500, 13500, None, 288, 8, 1800, 1100),
    "Ascend 910B": (320, None, None, 640, 64, 1.6, 392, 400),
    "Ascend 910C": (752, None, None, 1504, 128, 3.2, 784, None),
    "Ascend 950PR": (None, 1000, 2000, None, 128, 1.6, 2000, 600),
    "Ascend 950DT": (None, 1000, 2000, None, 144, 4, 2000, None),
}


def value(figure):
    return None if figure is None else figure.value


def test_every_device_is_bundled():
    assert sorted(load_device_profile(n).name for n in known_profiles()) == sorted(DOC)


@pytest.mark.parametrize("name", sorted(DOC))
def test_profile_matches_doc(name):
    p = load_device_profile(name)
    got = tuple(value(p.peak_tflops[x]) for x in PRECISIONS) + tuple(
        value(getattr(p, f)) for f in ("hbm_gb", "hbm_tb_s", "interconnect_gb_s", "tdp_w"))
    assert got == DOC[name]
    for f in ("step_overhead_us", "compute_efficiency", "memory_efficiency",
              "scaleup_latency_us", "scaleout_latency_us", "network_efficiency"):
        assert getattr(p, f).kind in ("assumption", "fitted")


def test_no_bundled_profile_fits_a_latency_floor_and_one_may_be_left_out(tmp_path):
    """docs/modeling.md, "The latency floor": a figure of the software stack, for the
    roofline step; kernel tables carry the floor in their small shapes' times."""
    assert {n: load_device_profile(n).layer_floor_us for n in DOC} == dict.fromkeys(DOC)
    text = (DEVICES_DIR / "h200.yaml").read_text()
    (tmp_path / "old.yaml").write_text("".join(line for line in text.splitlines(True)
                                               if not line.startswith("layer_floor_us")))
    assert load_device_profile(tmp_path / "old.yaml").layer_floor_us is None


@pytest.mark.parametrize("name", sorted(DOC))
def test_peak_of_an_unpublished_precision_raises(name):
    p = load_device_profile(name)
    for precision in PRECISIONS:
        if p.peak_tflops[precision] is None:
            with pytest.raises(ValueError, match=f"{name}: no published dense {precision}"):
                p.peak(precision)
        else:
            assert p.peak(precision) == p.peak_tflops[precision].value


def test_chip_labels_match_detect_device():
    chips = {n: load_device_profile(n).chip for n in DOC}
    assert {chips[n] for n in ("H100", "H200")} == {"SM90"}
    assert {chips[n] for n in ("B200", "GB200", "B300")} == {"SM100"}
    assert chips["Ascend 950PR"] == chips["Ascend 950DT"] == "Ascend 950"


def test_names_are_forgiving():
    assert load_device_profile("ascend_950pr").name == load_device_profile("Ascend 950PR").name
    assert load_device_profile("h200").name == "H200"


def test_unknown_precision_and_device():
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        load_device_profile("H200").peak("int4")
    with pytest.raises(ValueError, match="unknown device 'A100'.*ascend-910b"):
        load_device_profile("A100")


def edited(tmp_path, change):
    data = yaml.safe_load((DEVICES_DIR / "h200.yaml").read_text())
    change(data)
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(sm_count=132), r"dev.yaml:\d+: sm_count: unknown field; expected one of"),
    (lambda d: d.pop("tdp_w"), r"dev.yaml: missing field\(s\) tdp_w"),
    (lambda d: d["peak_tflops"].pop("fp4"), r"dev.yaml:\d+: peak_tflops: expected each of "
                                            r"bf16, fp8, fp4, int8"),
    (lambda d: d["hbm_gb"].update(kind="guess"), r"dev.yaml:\d+: hbm_gb.kind: expected one of"),
    (lambda d: d["hbm_gb"].update(kind="assumption"), r"hbm_gb.kind: expected one of vendor"),
    (lambda d: d["compute_efficiency"].update(kind="vendor"), "expected one of assumption"),
    (lambda d: d.update(step_overhead_us=None), r"step_overhead_us: expected \{value, kind, "
                                                r"source\}, got None"),
    (lambda d: d["hbm_tb_s"].update(source=""), "hbm_tb_s.source: expected a non-empty string"),
    (lambda d: d["tdp_w"].update(value=-1), r"tdp_w.value: expected a number in 0.001..1e\+07, "
                                            r"got -1"),
    (lambda d: d["tdp_w"].update(value=float("inf")), "tdp_w.value: expected a number in"),
    (lambda d: d["hbm_gb"].update(value=float("nan")), "hbm_gb.value: expected a number in"),
    (lambda d: d["hbm_gb"].update(value=1e300), r"hbm_gb.value: expected a number in 0.001..1e\+07"
                                                r", got 1e\+300"),
    (lambda d: d["hbm_tb_s"].update(value=1e-300), "hbm_tb_s.value: expected a number in"),
    (lambda d: d["peak_tflops"]["bf16"].update(value=5e-324), "peak_tflops.bf16.value"),
    (lambda d: d["compute_efficiency"].update(value=5), r"compute_efficiency.value: expected a "
                                                        r"number in 1e-06..1, got 5"),
    (lambda d: d["scaleup_devices"].update(value=8.5), "scaleup_devices.value: expected a whole "
                                                       "number in 1..65536, got 8.5"),
    (lambda d: d.update(backend="rocm"), r"dev.yaml:\d+: backend: expected one of cuda, npu"),
    (lambda d: d.update(name=["H200"]), r"dev.yaml:\d+: name: expected a non-empty string"),
])
def test_bad_profile_names_the_file_line_and_field(tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        load_device_profile(edited(tmp_path, change))


@pytest.mark.parametrize("text, match", [
    ("name: H200\nname: H100\n", r"dev.yaml:2: name: duplicate key \(first at line 1"),
    ("name: [H200\n", r"dev.yaml:2: not valid YAML"),
    ("name: !!python/object:os.system echo\n",
     r"dev.yaml:1: the tag !!python/object:os.system is not allowed"),
    ("name: !!binary SDIwMA==\n", r"dev.yaml:1: the tag !!binary is not allowed"),
    ("name: H200\nvendor: !!timestamp 2001-12-14\n", r"dev.yaml:2: the tag !!timestamp is not"),
    ("name: !!str H200\n", r"dev.yaml:1: the tag !!str is not allowed"),
    ("name: &n H200\nvendor: *n\n", r"dev.yaml:2: alias \*n: aliases are not allowed"),
    ("- H200\n", r"dev.yaml: expected a mapping of device fields"),
])
def test_a_profile_is_read_by_the_workloads_strict_loader(tmp_path, text, match):
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_device_profile(path)


def test_a_bundled_name_is_a_name_never_a_path():
    for name in ("../models/tiny", "../devices/h200", "/etc/passwd"):
        with pytest.raises(ValueError, match="unknown device"):
            load_device_profile(name)


def test_a_workload_with_a_bad_profile_file_is_refused_at_validation(tmp_path, capsys):
    from harness.commands import main

    path = edited(tmp_path, lambda d: d["peak_tflops"].pop("int8"))
    workload = tmp_path / "w.yaml"
    workload.write_text(f"trace: {{generate: {{requests: 2, rate: 1, prompt: {{fixed: 8}}, "
                        f"output: {{fixed: 2}}}}}}\nmodel: tiny\ndevice: modeled:{path}\n")
    assert main(["validate", str(workload)]) == 2
    err = capsys.readouterr().err
    assert f"w.yaml:3: device: {path}:" in err and ": peak_tflops: expected each of" in err
    assert "internal error" not in err


@pytest.mark.parametrize("make, what", [
    (lambda p: os.mkfifo(p), "is a FIFO (named pipe), not a regular file"),
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory, not a regular file"),
])
@pytest.mark.parametrize("name", ["dev.yaml", "dev"])
def test_a_profile_path_that_is_not_a_file_is_said_as_what_it_is(tmp_path, capsys, make, what,
                                                                name):
    """Not "an unknown profile": a FIFO, a missing path or a folder, named, never opened."""
    from harness.commands import main

    make(tmp_path / name)
    workload = tmp_path / "w.yaml"
    workload.write_text(f"trace: {{generate: {{requests: 2, rate: 1, prompt: {{fixed: 8}}, "
                        f"output: {{fixed: 2}}}}}}\nmodel: tiny\n"
                        f"device: modeled:{tmp_path / name}\n")
    with within(30):
        assert main(["validate", str(workload)]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert "w.yaml:3: device: " in err and f"{tmp_path / name}: {what}" in err
    if name == "dev":
        assert "a profile file's name ends in .yaml or .yml" in err
