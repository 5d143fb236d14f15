"""NVIDIA devices through NVML (nvidia-ml-py, imported as pynvml).

Per device and poll: utilisation, memory used and total, power, SM and memory clocks,
energy since the sampler started and, on Hopper or newer, the GPM metrics.

- util_pct is the percentage of time one or more kernels was running: a kernel on one SM
  counts as 100. Taken from nvmlDeviceGetSamples (the driver's samples since the previous
  poll, averaged; util_window_s is the time they cover); where a device does not offer
  them, from nvmlDeviceGetUtilizationRates, whose window (1/6 s to 1 s, by product) NVML
  does not report: util_window_s stays null and the notes say so.
- mem_busy_pct (nvmlDeviceGetUtilizationRates) is the percentage of time device memory
  was read or written, not a bandwidth.
- GPM (two nvmlGpmSampleGet samples at least 100 ms apart, then nvmlGpmMetricsGet) gives
  sm_activity_pct (SMs busy), tensor_activity_pct (any tensor pipe busy) and
  mem_bw_util_pct (DRAM bandwidth used, of the theoretical peak).

Errors: NotSupported nulls that reading for the rest of the run, noted once; GpuIsLost
nulls the whole device for the rest of the run; any other NVML error nulls that one
reading (the first one is noted).
"""

import importlib
import importlib.metadata
import math
import os
import time
from typing import List

from harness.telemetry.columns import row

GPM_MIN_PERIOD_S = 0.1
GPM_METRICS = {"sm_activity_pct": "NVML_GPM_METRIC_SM_UTIL",
               "tensor_activity_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
               "mem_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL"}
# The nvmlValue_t field for each NVML_VALUE_TYPE_* (0 = double ... 6 = unsigned short).
SAMPLE_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
SAMPLES_NOTE = "nvmlDeviceGetSamples: the driver's samples since the previous poll, averaged"
RATES_NOTE = ("nvmlDeviceGetUtilizationRates (nvmlDeviceGetSamples not supported): "
              "averaged over 1/6 s to 1 s depending on the product, window not reported")


class _Lost(Exception):
    pass


class _Gpu:
    def __init__(self, device, handle):
        self.device = device
        self.handle = handle
        self.key = f"nvml.gpu{device}"
        self.unsupported = set()
        self.lost = False
        self.use_samples = True
        self.last_seen_us = int(time.time() * 1e6)  # driver samples carry wall-clock µs
        self.energy_base_mj = None
        self.gpm = None  # [window start, window end] GPM sample buffers
        self.polls = 0


class NvmlSource:
    name = "nvml"

    def __init__(self, devices, period_s: float, clock, nvml=None, env=os.environ):
        self.period_s = period_s
        self.notes = {}
        self._clock = clock
        self._gpus: List[_Gpu] = []
        self._nvml = None
        self._gpm_every = math.ceil(GPM_MIN_PERIOD_S / period_s - 1e-9)  # polls per GPM window
        try:
            nvml = nvml or importlib.import_module("pynvml")
        except ImportError as e:
            self.notes["nvml"] = f"unavailable: {e}"
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            self.notes["nvml"] = f"unavailable: {e}"
            return
        self._nvml = nvml
        self.notes["nvml"] = (f"{_library()}driver {nvml.nvmlSystemGetDriverVersion()}; "
                              f"every {period_s:g} s, GPM every {self._gpm_every * period_s:g} s "
                              "where supported")
        for device in devices:
            self._open(device, env)

    @property
    def _lib(self):
        """pynvml, initialised: devices are opened and polled only once it is."""
        assert self._nvml is not None, "NVML is not initialised"
        return self._nvml

    def _open(self, device, env):
        nvml = self._lib
        try:
            handle, where = _handle(nvml, device, env)
            name = nvml.nvmlDeviceGetName(handle)
        except (nvml.NVMLError, ValueError) as e:
            self.notes[f"nvml.gpu{device}"] = f"not sampled: {e}"
            return
        gpu = _Gpu(device, handle)
        self.notes[gpu.key] = f"{name} (NVML {where})"
        self.notes[f"{gpu.key}.util"] = SAMPLES_NOTE
        try:
            gpu.energy_base_mj = self._read(gpu, "energy_j",
                                            nvml.nvmlDeviceGetTotalEnergyConsumption)
            gpu.gpm = self._gpm_open(gpu)
        except _Lost as e:
            self._mark_lost(gpu, e)
        self._gpus.append(gpu)

    def sample(self) -> list:
        return [self._poll(gpu) for gpu in self._gpus]

    def _poll(self, gpu):
        t = self._clock()
        if gpu.lost:
            return row(t, "nvml", gpu.device)
        try:
            return row(t, "nvml", gpu.device, **self._values(gpu))
        except _Lost as e:
            self._mark_lost(gpu, e)
            return row(t, "nvml", gpu.device)

    def _mark_lost(self, gpu, error):
        gpu.lost = True
        self.notes[f"{gpu.key}.lost"] = (f"at t={self._clock():.3f} s: {error}; "
                                         "nulls from then on")

    def _values(self, gpu) -> dict:
        nvml = self._lib
        rates = self._read(gpu, "rates", nvml.nvmlDeviceGetUtilizationRates)
        util, window = self._util(gpu, rates)
        values = {"util_pct": util, "util_window_s": window,
                  "mem_busy_pct": None if rates is None else rates.memory,
                  "sm_clock_mhz": self._read(gpu, "sm_clock_mhz", nvml.nvmlDeviceGetClockInfo,
                                             nvml.NVML_CLOCK_SM),
                  "mem_clock_mhz": self._read(gpu, "mem_clock_mhz", nvml.nvmlDeviceGetClockInfo,
                                              nvml.NVML_CLOCK_MEM)}
        memory = self._read(gpu, "memory", nvml.nvmlDeviceGetMemoryInfo)
        if memory is not None:
            values.update(mem_used_bytes=memory.used, mem_total_bytes=memory.total)
        power_mw = self._read(gpu, "power_w", nvml.nvmlDeviceGetPowerUsage)
        if power_mw is not None:
            values["power_w"] = power_mw / 1000
        energy_mj = self._read(gpu, "energy_j", nvml.nvmlDeviceGetTotalEnergyConsumption)
        if energy_mj is not None and gpu.energy_base_mj is not None:
            values["energy_j"] = (energy_mj - gpu.energy_base_mj) / 1000
        gpu.polls += 1
        if gpu.gpm is not None and gpu.polls % self._gpm_every == 0:
            values.update(self._gpm(gpu))
        return values

    def _read(self, gpu, what, call, *args):
        """call(handle, *args), or None where the device cannot tell."""
        nvml = self._lib
        if what in gpu.unsupported:
            return None
        try:
            return call(gpu.handle, *args)
        except nvml.NVMLError_NotSupported:
            gpu.unsupported.add(what)
            self.notes[f"{gpu.key}.{what}"] = "not supported"
        except nvml.NVMLError_GpuIsLost as e:
            raise _Lost(e) from None
        except nvml.NVMLError as e:
            self.notes.setdefault(f"{gpu.key}.{what}", f"error at t={self._clock():.3f} s: {e}")
        return None

    def _util(self, gpu, rates):
        """(util_pct, util_window_s); the window is None where NVML does not report it."""
        nvml = self._lib
        if gpu.use_samples:
            try:
                kind, samples = nvml.nvmlDeviceGetSamples(
                    gpu.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, gpu.last_seen_us)
            except nvml.NVMLError_NotSupported:
                gpu.use_samples = False
                self.notes[f"{gpu.key}.util"] = RATES_NOTE
            except nvml.NVMLError_NotFound:  # no new sample since the previous poll
                return None, None
            except nvml.NVMLError_GpuIsLost as e:
                raise _Lost(e) from None
            except nvml.NVMLError as e:
                self.notes.setdefault(f"{gpu.key}.util",
                                      f"error at t={self._clock():.3f} s: {e}")
                return None, None
            else:
                return _average(gpu, kind, samples)
        return (None if rates is None else rates.gpu), None

    def _gpm_open(self, gpu):
        """Two GPM sample buffers with the first sample taken, or None without GPM."""
        nvml = self._lib
        support = self._read(gpu, "gpm", nvml.nvmlGpmQueryDeviceSupport)
        if support is None:
            return None
        if not support.isSupportedDevice:
            self.notes[f"{gpu.key}.gpm"] = "not supported (GPM needs Hopper or newer)"
            return None
        buffers = []
        try:
            buffers = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            nvml.nvmlGpmSampleGet(gpu.handle, buffers[0])
        except nvml.NVMLError as e:
            self.notes[f"{gpu.key}.gpm"] = f"unavailable: {e}"
            _free(nvml, buffers)
            return None
        self.notes[f"{gpu.key}.gpm"] = "SM activity, tensor activity, DRAM bandwidth"
        return buffers

    def _gpm(self, gpu) -> dict:
        nvml = self._lib
        start, end = gpu.gpm
        query = nvml.c_nvmlGpmMetricsGet_t()
        query.version = nvml.NVML_GPM_METRICS_GET_VERSION
        query.numMetrics = len(GPM_METRICS)
        query.sample1, query.sample2 = start, end
        for i, metric in enumerate(GPM_METRICS.values()):
            query.metrics[i].metricId = getattr(nvml, metric)
        try:
            nvml.nvmlGpmSampleGet(gpu.handle, end)
            nvml.nvmlGpmMetricsGet(query)
        except nvml.NVMLError_GpuIsLost as e:
            raise _Lost(e) from None
        except nvml.NVMLError as e:
            self.notes.setdefault(f"{gpu.key}.gpm_error", f"at t={self._clock():.3f} s: {e}")
            return {}
        gpu.gpm = [end, start]  # the next window starts where this one ended
        return {column: metric.value if metric.nvmlReturn == nvml.NVML_SUCCESS else None
                for column, metric in zip(GPM_METRICS, query.metrics)}

    def close(self):
        if self._nvml is None:
            return
        for gpu in self._gpus:
            _free(self._nvml, gpu.gpm or [])
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def _average(gpu, kind, samples):
    if not samples:
        return None, None
    field = SAMPLE_VALUE_FIELDS[kind]
    last = max(s.timeStamp for s in samples)
    window = (last - gpu.last_seen_us) / 1e6
    gpu.last_seen_us = last
    return sum(getattr(s.sampleValue, field) for s in samples) / len(samples), window


def _handle(nvml, device, env):
    """The NVML handle of the engine's CUDA device, and how NVML names it.
    CUDA_VISIBLE_DEVICES renumbers CUDA devices; NVML ignores it."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return nvml.nvmlDeviceGetHandleByIndex(device), f"index {device}"
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if not 0 <= device < len(entries):
        raise ValueError(f"CUDA device {device} is not in CUDA_VISIBLE_DEVICES={visible!r}")
    entry = entries[device]
    if entry.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(entry)), f"index {entry}"
    return nvml.nvmlDeviceGetHandleByUUID(entry), entry


def _free(nvml, buffers):
    for buffer in buffers:
        try:
            nvml.nvmlGpmSampleFree(buffer)
        except nvml.NVMLError:
            pass


def _library() -> str:
    try:
        return f"nvidia-ml-py {importlib.metadata.version('nvidia-ml-py')}, "
    except importlib.metadata.PackageNotFoundError:
        return ""
