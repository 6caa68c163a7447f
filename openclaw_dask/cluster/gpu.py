"""Which NVIDIA GPUs this machine has: nvidia-ml-py (pynvml) first, then ``nvidia-smi``, then "none found".

Nothing here needs CuPy or a CUDA toolkit; the parsing is pure, so it is tested on any
machine with faked device lists (as dask-cuda's own tests fake ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Device", "GpuInfo", "cupy_version", "discover", "free_memory", "parse_nvidia_smi", "visible_devices"]

SMI_QUERY = "index,uuid,name,memory.total,driver_version"


@dataclass(frozen=True)
class Device:
    """One GPU: its index on this machine, UUID, model and memory in bytes."""

    index: int
    uuid: str
    name: str
    memory_bytes: int


@dataclass(frozen=True)
class GpuInfo:
    """What :func:`discover` found, and from where (``nvml``, ``nvidia-smi`` or ``none``)."""

    devices: tuple[Device, ...]
    source: str
    driver: str | None = None
    cuda: str | None = None
    tried: tuple[str, ...] = field(default=())  # why each source gave nothing, for "none found"

    def none_found(self) -> str:
        """One line for an error: what was looked at, and what to check."""
        looked = "; ".join(self.tried) or "nothing to ask"
        return (f"no NVIDIA GPU found ({looked}); check that `nvidia-smi` lists a device and that "
                "CUDA_VISIBLE_DEVICES does not hide it, or use backend thread or process")


def cupy_version() -> str | None:
    """The installed CuPy's version (any of its wheels: cupy-cuda12x, cupy-cuda13x, cupy), without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return None


def parse_nvidia_smi(text: str) -> tuple[tuple[Device, ...], str | None]:
    """Devices and driver from ``nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv,noheader,nounits``."""
    devices, driver = [], None
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        index, uuid, name, mib, driver = parts[:5]
        devices.append(Device(int(index), uuid, name, int(float(mib)) * 2**20))
    return tuple(devices), driver


def _from_nvml() -> GpuInfo:
    import pynvml

    pynvml.nvmlInit()
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name, uuid = pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)
            devices.append(Device(i, uuid if isinstance(uuid, str) else uuid.decode(),
                                  name if isinstance(name, str) else name.decode(),
                                  int(pynvml.nvmlDeviceGetMemoryInfo(h).total)))
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return GpuInfo(tuple(devices), "nvml", driver if isinstance(driver, str) else driver.decode(),
                       f"{cuda // 1000}.{cuda % 1000 // 10}")
    finally:
        pynvml.nvmlShutdown()


def _from_smi(smi: str) -> GpuInfo:
    out = subprocess.run([smi, f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    devices, driver = parse_nvidia_smi(out)
    return GpuInfo(devices, "nvidia-smi", driver)


def free_memory() -> dict[int, int]:
    """Free bytes of each GPU now, by index (not cached: other processes change it); empty if unreadable."""
    with contextlib.suppress(Exception):  # not installed, no driver: nvidia-smi next
        import pynvml

        pynvml.nvmlInit()
        try:
            return {i: int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).free)
                    for i in range(pynvml.nvmlDeviceGetCount())}
        finally:
            pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run([smi, "--query-gpu=index,memory.free", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return {int(i): int(float(mib)) * 2**20 for i, mib in (line.split(",")[:2] for line in out.strip().splitlines())}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


@functools.cache
def discover() -> GpuInfo:
    """The GPUs of this machine (cached: asked once per process)."""
    tried = []
    try:
        info = _from_nvml()
        if info.devices:
            return info
        tried.append("nvidia-ml-py: 0 devices")
    except ImportError:
        tried.append("nvidia-ml-py: not installed")
    except Exception as e:  # noqa: BLE001  (NVMLError_LibraryNotFound, DriverNotLoaded, ...)
        tried.append(f"nvidia-ml-py: {type(e).__name__}")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        tried.append("nvidia-smi: not on PATH")
    else:
        try:
            info = _from_smi(smi)
            if info.devices:
                return info
            tried.append("nvidia-smi: 0 devices")
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            tried.append(f"nvidia-smi failed: {type(e).__name__}")
    return GpuInfo((), "none", tried=tuple(tried))


def visible_devices(devices: Sequence[Device], wanted: Sequence[int] | None,
                    env: str | None = None) -> tuple[Device, ...]:
    """The devices a cluster may use: ``gpu.devices`` if given, else those ``CUDA_VISIBLE_DEVICES`` shows, else all.

    ``CUDA_VISIBLE_DEVICES`` may name indices or ``GPU-``/``MIG-`` UUIDs; an entry that matches
    no device is ignored, as CUDA ignores it.
    """
    if wanted is not None:
        by_index = {d.index: d for d in devices}
        return tuple(by_index[i] for i in wanted if i in by_index)
    env = os.environ.get("CUDA_VISIBLE_DEVICES") if env is None else env
    if env is None or env.strip() == "":
        return tuple(devices) if env is None else ()
    picked: list[Device] = []
    for entry in (e.strip() for e in env.split(",")):
        match = [d for d in devices if (entry.isdigit() and d.index == int(entry)) or d.uuid.startswith(entry)]
        picked.extend(m for m in match if m not in picked)
    return tuple(picked)
