"""The NVML source against a fake pynvml: the real module's constants, error classes and
ctypes structs, with fake functions. Every call path, errors included; and the real
nvidia-ml-py on whatever machine runs the tests."""

import ctypes
import itertools
import time

import pytest

from harness.telemetry.nvml import RATES_NOTE, SAMPLES_NOTE, NvmlSource

pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (pynvml) is not installed")

MIB = 1 << 20


def _nvml_driver_present():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


DRIVER = _nvml_driver_present()


class FakeGpu:
    def __init__(self, name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", gpm=True,
                 total=80 * 1024 * MIB, unsupported=()):
        self.name, self.uuid, self.gpm = name, uuid, gpm
        self.unsupported = set(unsupported)  # "samples", "power", "energy", ...
        self.lost = False
        self.fail_once = {}                  # what -> NVML error code, raised on the next call
        self.samples = []                    # (wall-clock µs, util %) the driver has taken
        self.rates = (70, 35)                # (gpu, memory) from nvmlDeviceGetUtilizationRates
        self.used, self.total = 20 * 1024 * MIB, total
        self.power_mw = 350_000
        self.clocks = {pynvml.NVML_CLOCK_SM: 1980, pynvml.NVML_CLOCK_MEM: 2619}
        self.energy_mj = 1_000_000
        self.calls = []
        self.gpm_filled = None               # the buffer nvmlGpmSampleGet filled last

    def enter(self, what):
        self.calls.append(what)
        if self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if what in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if what in self.fail_once:
            raise pynvml.NVMLError(self.fail_once.pop(what))

    def add_samples(self, *values, spacing_us=166_000):
        now = int(time.time() * 1e6)
        self.samples += [(now + (i + 1) * spacing_us, v) for i, v in enumerate(values)]
        return self.samples[-1][0]


class FakeNvml:
    """pynvml's constants, error classes and structs; fake functions over FakeGpus."""

    def __init__(self, gpus, init_error=None):
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus, self.init_error = gpus, init_error
        self.gpm_metrics = {pynvml.NVML_GPM_METRIC_SM_UTIL: 62.5,
                            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 41.0,
                            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 73.25}
        self.gpm_windows = []                # (sample1, sample2) addresses per nvmlGpmMetricsGet
        self.allocated, self.freed, self.shut_down = [], [], False

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, gpu):
        gpu.enter("name")
        return gpu.name

    def nvmlDeviceGetSamples(self, gpu, sampling_type, last_seen):
        gpu.enter("samples")
        assert sampling_type == pynvml.NVML_GPU_UTILIZATION_SAMPLES
        fresh = [(ts, v) for ts, v in gpu.samples if ts > last_seen]
        if not fresh:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        samples = []
        for ts, v in fresh:
            s = pynvml.c_nvmlSample_t()
            s.timeStamp, s.sampleValue.uiVal = ts, v
            samples.append(s)
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples

    def nvmlDeviceGetUtilizationRates(self, gpu):
        gpu.enter("rates")
        return pynvml.c_nvmlUtilization_t(*gpu.rates)

    def nvmlDeviceGetMemoryInfo(self, gpu):
        gpu.enter("memory")
        return pynvml.c_nvmlMemory_t(gpu.total, gpu.total - gpu.used, gpu.used)

    def nvmlDeviceGetPowerUsage(self, gpu):
        gpu.enter("power")
        return gpu.power_mw

    def nvmlDeviceGetClockInfo(self, gpu, clock):
        gpu.enter("clock")
        return gpu.clocks[clock]

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu):
        gpu.enter("energy")
        return gpu.energy_mj

    def nvmlGpmQueryDeviceSupport(self, gpu):
        gpu.enter("gpm_support")
        support = pynvml.c_nvmlGpmSupport_t()
        support.isSupportedDevice = int(gpu.gpm)
        return support

    def nvmlGpmSampleAlloc(self):
        buffer = pynvml.struct_c_nvmlGpmSample_t()
        self.allocated.append(buffer)  # kept alive: the pointer below points into it
        return ctypes.pointer(buffer)

    def nvmlGpmSampleFree(self, sample):
        self.freed.append(ctypes.addressof(sample.contents))

    def nvmlGpmSampleGet(self, gpu, sample):
        gpu.enter("gpm_sample")
        gpu.gpm_filled = ctypes.addressof(sample.contents)
        return sample

    def nvmlGpmMetricsGet(self, query):
        assert query.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        first, second = (ctypes.addressof(query.sample1.contents),
                         ctypes.addressof(query.sample2.contents))
        assert any(g.gpm_filled == second for g in self.gpus), "sample2 must be the newest"
        self.gpm_windows.append((first, second))
        for i in range(query.numMetrics):
            metric = query.metrics[i]
            if metric.metricId in self.gpm_metrics:
                metric.value, metric.nvmlReturn = self.gpm_metrics[metric.metricId], 0
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return query


def clock():
    return 4.5


def open_source(*gpus, period_s=0.05, env=None, **fake):
    nvml = FakeNvml(list(gpus), **fake)
    return NvmlSource(list(range(len(gpus))), period_s, clock, nvml=nvml, env=env or {}), nvml


def test_samples_path_reads_every_field():
    gpu = FakeGpu()
    before_us = time.time() * 1e6
    source, _ = open_source(gpu)
    after_us = time.time() * 1e6
    last = gpu.add_samples(30, 50)
    gpu.energy_mj += 12_500
    first = source.sample()[0]
    assert first["t_s"] == 4.5 and first["source"] == "nvml" and first["device"] == 0
    assert first["util_pct"] == 40.0
    assert (last - after_us) / 1e6 <= first["util_window_s"] <= (last - before_us) / 1e6
    assert first["mem_busy_pct"] == 35
    assert first["mem_used_bytes"] == 20 * 1024 * MIB
    assert first["mem_total_bytes"] == 80 * 1024 * MIB
    assert first["power_w"] == 350.0
    assert (first["sm_clock_mhz"], first["mem_clock_mhz"]) == (1980, 2619)
    assert first["energy_j"] == 12.5
    # 50 ms polls: GPM windows of two polls (>= 100 ms)
    assert first["sm_activity_pct"] is None and first["mem_bw_util_pct"] is None

    newest = gpu.add_samples(90, spacing_us=500_000)
    second = source.sample()[0]
    assert second["util_pct"] == 90.0
    assert second["util_window_s"] == pytest.approx((newest - last) / 1e6)
    assert (second["sm_activity_pct"], second["tensor_activity_pct"],
            second["mem_bw_util_pct"]) == (62.5, 41.0, 73.25)

    third = source.sample()[0]  # no driver sample since the previous poll
    assert third["util_pct"] is None and third["util_window_s"] is None
    assert third["mem_used_bytes"] == 20 * 1024 * MIB

    assert "driver 570.86.15" in source.notes["nvml"]
    assert source.notes["nvml.gpu0"] == "NVIDIA H100 80GB HBM3 (NVML index 0)"
    assert source.notes["nvml.gpu0.util"] == SAMPLES_NOTE
    assert source.notes["nvml.gpu0.gpm"].startswith("SM activity")


def test_gpm_windows_follow_each_other_and_buffers_are_freed():
    gpu = FakeGpu()
    source, nvml = open_source(gpu, period_s=0.2)  # >= 100 ms: GPM on every poll
    rows = [source.sample()[0] for _ in range(3)]
    assert [r["sm_activity_pct"] for r in rows] == [62.5] * 3
    assert gpu.calls.count("gpm_sample") == 4  # the window start, then one per poll
    windows = nvml.gpm_windows
    assert len(windows) == 3 and len({w[0] for w in windows} | {w[1] for w in windows}) == 2
    for previous, current in itertools.pairwise(windows):
        assert current[0] == previous[1]  # each window starts where the last one ended
    source.close()
    assert sorted(nvml.freed) == sorted(ctypes.addressof(b) for b in nvml.allocated)
    assert nvml.shut_down


def test_a_gpm_metric_the_device_lacks_is_null():
    source, nvml = open_source(FakeGpu(), period_s=0.1)
    del nvml.gpm_metrics[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL]
    r = source.sample()[0]
    assert r["tensor_activity_pct"] is None
    assert (r["sm_activity_pct"], r["mem_bw_util_pct"]) == (62.5, 73.25)


def test_without_driver_samples_utilisation_comes_from_the_rates():
    gpu = FakeGpu(unsupported={"samples"})
    source, _ = open_source(gpu)
    for r in (source.sample()[0], source.sample()[0]):
        assert r["util_pct"] == 70 and r["util_window_s"] is None and r["mem_busy_pct"] == 35
    assert gpu.calls.count("samples") == 1  # not asked again
    assert source.notes["nvml.gpu0.util"] == RATES_NOTE
    assert "1/6 s to 1 s" in RATES_NOTE


def test_pre_hopper_device_has_no_gpm():
    gpu = FakeGpu(name="NVIDIA A100-SXM4-80GB", gpm=False)
    source, nvml = open_source(gpu, period_s=0.1)
    rows = [source.sample()[0] for _ in range(3)]
    assert all(r[c] is None for r in rows
               for c in ("sm_activity_pct", "tensor_activity_pct", "mem_bw_util_pct"))
    assert all(r["mem_total_bytes"] == 80 * 1024 * MIB for r in rows)
    assert nvml.allocated == [] and "gpm_sample" not in gpu.calls
    assert "Hopper" in source.notes["nvml.gpu0.gpm"]


def test_a_lost_gpu_reads_null_from_then_on_and_the_others_go_on():
    healthy, failing = FakeGpu(), FakeGpu(uuid="GPU-bbbb")
    source, _ = open_source(healthy, failing, period_s=0.1)
    before = source.sample()
    assert before[1]["mem_used_bytes"] == 20 * 1024 * MIB
    failing.lost = True
    for _ in range(2):
        good, lost = source.sample()
        assert good["mem_used_bytes"] == 20 * 1024 * MIB and good["power_w"] == 350.0
        assert (lost["t_s"], lost["source"], lost["device"]) == (4.5, "nvml", 1)
        assert all(v is None for k, v in lost.items() if k not in ("t_s", "source", "device"))
    calls = len(failing.calls)
    source.sample()
    assert len(failing.calls) == calls  # a lost device is not asked again
    assert source.notes["nvml.gpu1.lost"] == "at t=4.500 s: GPU is lost; nulls from then on"
    assert "nvml.gpu0.lost" not in source.notes


def test_unsupported_power_and_energy_read_null_and_are_noted_once():
    gpu = FakeGpu(unsupported={"power", "energy"})
    source, _ = open_source(gpu)
    rows = [source.sample()[0] for _ in range(3)]
    assert all(r["power_w"] is None and r["energy_j"] is None for r in rows)
    assert all(r["sm_clock_mhz"] == 1980 for r in rows)
    assert gpu.calls.count("power") == 1 and gpu.calls.count("energy") == 1
    assert source.notes["nvml.gpu0.power_w"] == "not supported"
    assert source.notes["nvml.gpu0.energy_j"] == "not supported"


def test_another_nvml_error_nulls_only_that_reading():
    gpu = FakeGpu()
    source, _ = open_source(gpu)
    gpu.fail_once["memory"] = pynvml.NVML_ERROR_UNKNOWN
    failed, recovered = source.sample()[0], source.sample()[0]
    assert failed["mem_used_bytes"] is None and failed["power_w"] == 350.0
    assert recovered["mem_used_bytes"] == 20 * 1024 * MIB
    assert source.notes["nvml.gpu0.memory"] == "error at t=4.500 s: Unknown Error"


def test_an_nvml_that_cannot_start_gives_no_rows_and_says_why():
    source, _ = open_source(FakeGpu(), init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert source.sample() == []
    assert source.notes == {"nvml": "unavailable: Driver Not Loaded"}
    source.close()


def test_cuda_visible_devices_picks_the_nvml_device():
    gpus = [FakeGpu(uuid=f"GPU-{i}", total=(i + 1) * 1024 * MIB) for i in range(4)]
    nvml = FakeNvml(gpus)
    source = NvmlSource([0, 1, 2], 0.1, clock, nvml=nvml,
                        env={"CUDA_VISIBLE_DEVICES": "2,GPU-0"})
    rows = source.sample()
    assert [(r["device"], r["mem_total_bytes"]) for r in rows] == [(0, 3 * 1024 * MIB),
                                                                  (1, 1 * 1024 * MIB)]
    assert source.notes["nvml.gpu0"].endswith("(NVML index 2)")
    assert source.notes["nvml.gpu1"].endswith("(NVML GPU-0)")
    assert source.notes["nvml.gpu2"].startswith("not sampled: CUDA device 2 is not in")


@pytest.mark.skipif(DRIVER, reason="an NVIDIA driver is present: see the next test")
def test_real_nvidia_ml_py_without_a_driver_says_so():
    source = NvmlSource([0], 0.1, clock)
    assert source.sample() == []
    assert source.notes["nvml"] in ("unavailable: NVML Shared Library Not Found",
                                    "unavailable: Driver Not Loaded")
    source.close()


@pytest.mark.skipif(not DRIVER, reason="no NVIDIA driver on this machine")
def test_real_nvidia_ml_py_reads_device_0():
    source = NvmlSource([0], 0.1, clock, env={})
    try:
        r = source.sample()[0]
    finally:
        source.close()
    assert r["mem_total_bytes"] > 0 and r["mem_used_bytes"] <= r["mem_total_bytes"]
    assert r["sm_clock_mhz"] > 0
