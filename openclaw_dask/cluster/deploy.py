"""``openclaw scheduler`` and ``openclaw worker``: distributed's own CLIs, shaped by the config.

Both run the stock ``dask scheduler`` / ``dask worker`` with command-line options for
what the config says about binding and sizing, and the rest of the config (timeouts,
TLS, socket buffers, preloads, log level, the ``dask:`` section) handed over as dask
configuration in ``DASK_INTERNAL_INHERIT_CONFIG``, the variable distributed itself
uses to pass configuration to the processes it spawns. A stock ``dask worker`` joins
an ``openclaw scheduler`` and an ``openclaw worker`` joins a stock ``dask scheduler``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster import cupy_pool_preload
from openclaw_dask.cluster.base import Backend
from openclaw_dask.cluster.local import ProcessBackend
from openclaw_dask.cluster.network import bind_host, dashboard_address, http_address, http_host, protocol
from openclaw_dask.cluster.scratch import max_spill, named_folder
from openclaw_dask.cluster.settings import add_preload, dask_settings
from openclaw_dask.cluster.worker_shape import task_threads, worker_processes
from openclaw_dask.errors import ConfigError

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["DEFAULT_PORT", "Command", "require_free_port", "scheduler_command", "worker_command"]

DEFAULT_PORT = 8786
_DEPLOYED = ProcessBackend()  # what the started processes are: workers under nannies, as the process backend's


@dataclass(frozen=True)
class Command:
    """A process to start: its argument vector and full environment."""

    argv: list[str]
    env: dict[str, str]
    settings: dict[str, Any]  # the dask configuration inside env, flat


def _dask_cli() -> str:
    here = Path(sys.executable).parent / "dask"
    return str(here) if here.is_file() else "dask"


def _settings(config: Config) -> dict[str, Any]:
    settings = dask_settings(config, Backend())  # no backend's own keys: those shape the clusters a session starts
    level = config.parallel.log_level.lower()
    settings.update({"logging.distributed": level, "logging.openclaw_dask": level})
    return settings


def _command(argv: list[str], settings: dict[str, Any]) -> Command:
    import dask.config

    nested: dict[str, Any] = {}
    for key, value in settings.items():
        dask.config.set({key: value}, config=nested)
    env = {**os.environ, "DASK_INTERNAL_INHERIT_CONFIG": dask.config.serialize(nested)}
    # A nanny lets a variable already in its environment beat pre-spawn-environ, so set them here too.
    env.update({k.rpartition(".")[2]: str(v) for k, v in settings.items() if k.startswith("distributed.nanny.pre-spawn-environ.")})
    return Command(argv, env, settings)


def _bind(config: Config) -> tuple[list[str], str]:
    """The bind options, and the host the HTTP servers take (TLS does not cover HTTP: loopback unless allowed)."""
    iface = config.parallel.network_interface
    host = bind_host(config)  # refuses a non-loopback bind the config does not allow
    return (["--interface", iface] if iface else ["--host", config.cluster.host]), http_host(config, host)


def _check(config: Config) -> None:
    """Check ``config`` as the worker-process deployment these commands start, whatever ``parallel.backend`` says.

    One file can then hold ``backend: remote`` and the address for clients, and the
    workers' settings for ``openclaw worker``.
    """
    if config.security.temporary_certificates:
        raise ConfigError.at(config, "security.temporary_certificates", "a throw-away certificate lives in one process, so "
                             "separate scheduler and worker processes cannot share it", hint="give security.ca_file, cert_file and key_file")
    if config.parallel.communication == "inproc":
        raise ConfigError.at(config, "parallel.communication", "works within one process only",
                             hint="a scheduler or worker process needs tcp or tls")
    deployed = _deployed(config)
    as_deployed = dataclasses.replace(config, parallel=dataclasses.replace(config.parallel, backend=deployed.name),
                                      cluster=dataclasses.replace(config.cluster, scheduler_address=None))
    deployed.check(as_deployed)


def _deployed(config: Config) -> Backend:
    """The backend whose workers these commands start: the GPU backend the config names, else the process backend's."""
    from openclaw_dask.cluster.registry import declared

    named = declared(config.parallel.backend, source=config.sources.get("parallel.backend"))
    if not named.capabilities.gpu:
        return _DEPLOYED
    named.available(config)  # no GPU, or no dask-cuda: say so before anything starts
    return named


def _gpu_worker(config: Config, backend: Any, settings: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """``dask cuda worker`` options and environment: one worker per GPU, its limits, pool and transport."""
    gp = backend.gpu_plan(config)
    argv = ["--nthreads", "1", "--device-memory-limit", str(gp.pool_bytes)]
    if gp.pool == "rmm":
        argv += ["--rmm-pool-size", str(gp.pool_bytes)]
    else:  # CuPy's own pool, limited (or off), set in each worker as it starts
        add_preload(settings, (cupy_pool_preload.__name__,), ("worker",))
        settings[cupy_pool_preload.SETTING] = gp.pool_bytes if gp.pool == "cupy" else None
    if gp.protocol == "ucx":
        argv += ["--protocol", "ucx", "--enable-nvlink", *(["--enable-infiniband", "--enable-rdmacm"] if gp.rdma else [])]
    return argv, {"CUDA_VISIBLE_DEVICES": ",".join(str(d.index) for d in gp.used)}


def scheduler_command(config: Config, *, port: int | None = None, scheduler_file: str | None = None) -> Command:
    """The ``dask scheduler`` command for ``config``.

    Parameters
    ----------
    port
        Default: the port of ``cluster.scheduler_address``, else 8786.
    scheduler_file
        Where the scheduler writes its address (for workers' and clients' ``--scheduler-file``).
    """
    _check(config)
    if port is None:
        port = _port_of(config)
    bind, web = _bind(config)
    argv = [_dask_cli(), "scheduler", *bind, "--port", str(port), "--protocol", protocol(config, _DEPLOYED)]
    argv += ["--dashboard-address", http_address(config, web)]
    argv += ["--dashboard"] if dashboard_address(config, web) else ["--no-dashboard"]
    if scheduler_file:
        argv += ["--scheduler-file", scheduler_file]
    return _command(argv, _settings(config))


def _port_of(config: Config) -> int:
    """The port of ``cluster.scheduler_address`` (``tcp://HOST`` alone: 8786, as dask's own default)."""
    address = config.cluster.scheduler_address
    if not address:
        return DEFAULT_PORT
    _, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or "]" in port:  # no port, or an IPv6 host alone ([::1])
        return DEFAULT_PORT
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError.at(config, "cluster.scheduler_address", f"has port {port!r}, not a number from 0 to 65535",
                             hint="write it as tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786, or pass --port")
    return int(port)


def require_free_port(config: Config, port: int) -> None:
    """Refuse a scheduler port that is taken before ``dask scheduler`` starts (it would end in a 64-line traceback).

    Raises
    ------
    ConfigError
        Naming the host and port, and the fix.
    """
    from openclaw_dask.cluster.network import port_taken

    if port == 0:
        return
    host = bind_host(config)
    taken = port_taken(host, port)
    if taken is not None:
        raise ConfigError(f"the scheduler cannot listen on {host}:{port}: {taken} (another scheduler, "
                          "or another program, has it)", hint="stop it, pass --port with a free port, or --port 0 for any")


def worker_command(config: Config, address: str | None = None, *, scheduler_file: str | None = None) -> Command:
    """The ``dask worker`` command for ``config``: ``parallel.workers`` processes under nannies.

    With ``parallel.backend: cuda``, ``dask cuda worker`` instead: a worker per GPU of
    ``gpu.devices`` with the byte limits and transport the cuda backend computes.

    Each process gets ``omp_threads`` task threads (one with ``hybrid``, and
    ``omp_threads`` BLAS/OpenMP threads instead); ``parallel.timeout`` bounds how long
    a worker waits for its scheduler before it gives up.
    """
    _check(config)
    address = address or config.cluster.scheduler_address
    if not address and not scheduler_file:
        raise ConfigError("openclaw worker needs the scheduler's address",
                          hint="openclaw worker tcp://HOST:8786, or --scheduler-file, or cluster.scheduler_address")
    bind, web = _bind(config)
    backend, settings = _deployed(config), _settings(config)
    env: dict[str, str] = {}
    where = [address] if address else ["--scheduler-file", scheduler_file]
    if backend.capabilities.gpu:  # dask-cuda's worker CLI: it starts one worker per visible GPU itself
        shape, env = _gpu_worker(config, backend, settings)
        argv = [_dask_cli(), "cuda", "worker", *where, *bind, *shape]
    else:
        argv = [_dask_cli(), "worker", *where, *bind, "--nworkers", str(worker_processes(config)),
                "--nthreads", str(task_threads(config))]
    argv += ["--death-timeout", f"{config.parallel.timeout:g}s"]
    if config.cluster.memory_limit != "auto":
        argv += ["--memory-limit", str(config.cluster.memory_limit)]
    dash = dashboard_address(config, web)
    argv += ["--dashboard-address", dash.rpartition(":")[0] + ":0" if dash else f"{web}:0"]
    argv += ["--dashboard"] if dash else ["--no-dashboard"]
    # The workers outlive this command (it execs dask worker), so no folder of openclaw's own:
    # dask's scratch space in the system temp folder (which dask removes on exit), or the one named.
    folder = named_folder(config)
    if folder is not None:
        argv += ["--local-directory", str(folder)]
    settings["distributed.worker.memory.max-spill"] = max_spill(config, folder or tempfile.gettempdir())
    command = _command(argv, settings)
    command.env.update(env)
    return command
