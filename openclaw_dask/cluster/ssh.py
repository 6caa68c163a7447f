"""``ssh``: a scheduler and worker processes started over SSH on ``ssh.hosts`` (distributed's SSHCluster).

The scheduler runs on the first host and ``parallel.workers`` worker processes are spread over
all of them, the first included: distributed's ``SSHCluster`` parts (``distributed.deploy.ssh``'s
``Scheduler`` and ``Worker``, one SSH connection each, in a ``SpecCluster``), with one set of
worker options per host. The mapping:

- ``ssh.hosts`` -> where each process runs and the address it binds (``host=``), or
  ``parallel.network_interface`` -> ``interface=`` on every host; ``USER@NAME`` logs in as USER;
- ``ssh.ssh_port``, ``ssh.known_hosts``, ``ssh.client_keys`` -> asyncssh's ``port``, ``known_hosts``
  (never off: an unknown host key is refused) and ``client_keys``; ``parallel.timeout`` -> its
  ``connect_timeout`` and the workers' ``death_timeout``;
- ``ssh.remote_python`` -> the interpreter each host starts ``distributed.cli.dask_spec`` with;
- ``parallel.workers`` -> ``n_workers`` per host (``auto``: each host's cores / ``omp_threads``, asked
  when the session starts); ``omp_threads``/``hybrid`` -> ``nthreads`` and the BLAS/OpenMP threads of
  each worker process, as on the process backend; ``cluster.memory_limit`` -> ``memory_limit``;
- this session's dask configuration travels with every command (SSHCluster's
  ``DASK_INTERNAL_INHERIT_CONFIG``): comm timeouts, TLS files, preloads, BLAS variables at spawn,
  ``cluster.local_directory`` (the same path on every host; ``auto``: each host's own temporary folder).

Before anything starts, each host is probed over SSH (:func:`probe_hosts`, also run by
``openclaw doctor``): an unreachable host, a refused key, an unknown host key or a Python that
cannot import openclaw_dask and distributed is one line naming the host and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shlex
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.network import http_host, protocol
from openclaw_dask.cluster.plugins import BlasThreads
from openclaw_dask.cluster.security import security_for, tls_plan
from openclaw_dask.cluster.starting import first_cause, interruptible
from openclaw_dask.cluster.worker_shape import blas_threads, task_threads
from openclaw_dask.config import changed_from_defaults
from openclaw_dask.config.checks import check_bind
from openclaw_dask.errors import ClusterStartError, ConfigError, shorten

if TYPE_CHECKING:
    from openclaw_dask.cluster.running import RunningCluster
    from openclaw_dask.config import Config

__all__ = ["Host", "SshBackend", "hosts_of", "probe_each", "probe_hosts"]

logger = logging.getLogger("openclaw_dask.cluster")

# Keys with no meaning for processes on other machines, refused when set (with why).
_REFUSED = MappingProxyType({
    "cluster.host": "ssh.hosts says where the scheduler and each worker bind",
    "cluster.dashboard": "the dashboard would be served by the scheduler on the first SSH host; reach it with ssh -L",
    "monitoring.port": "the scheduler's HTTP server runs on the first SSH host, on a free port",
    "cluster.max_spill": "each host's disk is its own; bound spilling with distributed.worker.memory.max-spill in the dask: section",
})
# How long closing waits for the nannies to stop their worker processes (distributed's Nanny.kill: 4 s, then up to 9).
_NANNIES_CLOSE_S = 15
_ALIVE_S = 2  # a scheduler that does not answer within this gets distributed's own close (a refused connect is retried)
# What the probe runs on each host: the imports a worker needs, then the cores it sees.
_PROBE = "import openclaw_dask, distributed; from dask.system import CPU_COUNT; print(CPU_COUNT)"


@dataclass(frozen=True)
class Host:
    """One SSH host: its name as written, where to connect and log in, and its Python."""

    name: str
    address: str
    user: str | None
    python: str

    def __str__(self) -> str:
        return self.name


def hosts_of(config: Config) -> list[Host]:
    """``ssh.hosts`` with their users and Pythons; :class:`ConfigError` when they do not add up."""
    import sys

    s = config.ssh
    if not s.hosts:
        raise ConfigError.at(config, "ssh.hosts", "backend ssh needs the machines to run on",
                             hint="e.g. --set ssh.hosts=node1,node2 (the scheduler runs on the first)")
    pythons = s.remote_python or (sys.executable,)
    if len(pythons) not in (1, len(s.hosts)):
        raise ConfigError.at(config, "ssh.remote_python", f"{len(pythons)} paths for {len(s.hosts)} hosts",
                             hint="give one path for every host, or one per host in the order of ssh.hosts")
    out = []
    for i, name in enumerate(s.hosts):
        user, _, address = name.rpartition("@")
        out.append(Host(name, address, user or None, pythons[i % len(pythons)]))
    seen = [h.address for h in out]
    twice = next((a for a in seen if seen.count(a) > 1), None)
    if twice is not None:
        raise ConfigError.at(config, "ssh.hosts", f"{twice} is listed twice", hint="list each machine once; "
                             "parallel.workers sets how many worker processes each runs")
    return out


def _workers_per_host(config: Config, n_hosts: int) -> list[int] | None:
    """Worker processes on each host, first hosts first; ``None`` for ``auto`` (each host's cores)."""
    n = config.parallel.workers
    if n == "auto":
        return None
    if n < n_hosts:
        raise ConfigError.at(config, "parallel.workers", f"fewer worker processes than the {n_hosts} ssh.hosts",
                             hint=f"set parallel.workers to at least {n_hosts}, or list fewer hosts")
    return [n // n_hosts + (i < n % n_hosts) for i in range(n_hosts)]


def _key_paths(config: Config) -> list[str]:
    """``ssh.client_keys`` as absolute paths (relative ones from the config file's folder), each checked to exist."""
    out = []
    for written in config.ssh.client_keys:
        path = Path(written).expanduser()
        where = config.sources.get("ssh.client_keys", "default").rpartition(":")[0]
        if not path.is_absolute() and config.path is not None and where and Path(where).resolve() == config.path:
            path = config.path.parent / path
        if not path.is_file():
            raise ConfigError.at(config, "ssh.client_keys", f"no such key file ({path})",
                                 hint="give the path of a private key (ssh-keygen makes one), or [] for SSH's defaults")
        out.append(str(path.absolute()))
    return out


def _known_hosts(config: Config) -> str:
    """``ssh.known_hosts`` as an absolute path, checked to exist (asyncssh would call a missing one unreachable)."""
    known = config.resolve_path("ssh.known_hosts")
    assert known is not None
    if not known.is_file():
        host, port = config.ssh.hosts[0].rpartition("@")[2] if config.ssh.hosts else "HOST", config.ssh.ssh_port
        raise ConfigError.at(config, "ssh.known_hosts", f"no such file ({known})", hint="log in to each host once with "
                             f"ssh -p {port} {host}, or add its key with ssh-keyscan -p {port} {host} >> {known} after "
                             "checking its fingerprint")
    return str(known)


def _connect_options(config: Config, host: Host) -> dict[str, Any]:
    """The keywords of ``asyncssh.connect`` for ``host`` (plain data)."""
    known = _known_hosts(config)
    options: dict[str, Any] = {"port": config.ssh.ssh_port, "known_hosts": str(known),
                               "connect_timeout": config.parallel.timeout}
    keys = _key_paths(config)
    if keys:
        options["client_keys"] = keys
    if host.user:
        options["username"] = host.user
    return options


class SshBackend(Backend):
    """``ssh``: the scheduler on the first of ``ssh.hosts``, worker processes on all of them, over SSH."""

    name = "ssh"
    capabilities = Capabilities(worker_processes=True, tls=True, ssh=True)
    why_not = MappingProxyType({
        "resize": "SSH workers are started on each host when the session starts (change parallel.workers)",
        "prometheus": "the scheduler runs on the first SSH host, which serves distributed's own /metrics",
        "socket_buffers": "the remote hosts' sockets are sized by their kernels, not by openclaw",
    })
    requires = ("distributed", "asyncssh")
    extra = "ssh"

    def check(self, config: Config) -> None:
        super().check(config)
        hosts = hosts_of(config)
        _workers_per_host(config, len(hosts))  # the key files are checked when the session starts (plan), as TLS files are
        p = config.parallel
        if p.communication not in ("auto", "tcp", "tls"):
            raise ConfigError.at(config, "parallel.communication", "SSH hosts are joined by tcp:// or tls:// addresses",
                                 hint="use auto")
        if config.security.temporary_certificates:
            raise ConfigError.at(config, "security.temporary_certificates", "certificates made in this process's memory "
                                 "cannot reach the SSH hosts", hint="set security.ca_file, cert_file and key_file "
                                 "(the same paths on every host)")
        for key, why in _REFUSED.items():
            if changed_from_defaults(config, (key,)) and not (key == "cluster.dashboard" and config.get(key) is False):
                raise ConfigError.at(config, key, why, hint="remove it")
        iface = p.network_interface
        if iface is not None:
            check_bind(config, "parallel.network_interface", "127.0.0.1" if iface == "lo" else iface)
        else:
            for h in hosts:
                check_bind(config, "ssh.hosts", h.address)

    def plan(self, config: Config) -> dict[str, Any]:
        """The scheduler's and each host's worker options, and how to reach each host (plain data)."""
        hosts = hosts_of(config)
        per_host = _workers_per_host(config, len(hosts))
        p, c = config.parallel, config.cluster
        proto = protocol(config, self)
        sched_kw: dict[str, Any] = {"port": 0, "protocol": proto, "dashboard": False}
        worker_kw: dict[str, Any] = {"nthreads": task_threads(config), "protocol": proto, "death_timeout": p.timeout}
        if c.memory_limit != "auto":
            worker_kw["memory_limit"] = c.memory_limit
        workers = []
        for i, h in enumerate(hosts):
            bind = {"interface": p.network_interface} if p.network_interface else {"host": h.address}
            web = "127.0.0.1" if p.network_interface else http_host(config, h.address)  # plain HTTP: loopback unless allowed
            kw = {**worker_kw, **bind, "dashboard_address": f"{web}:0"}
            if i == 0:
                sched_kw.update(bind, dashboard_address=f"{web}:0")
            workers.append({"host": h.name, "address": h.address, "n_workers": "auto" if per_host is None else per_host[i],
                            "connect_options": _connect_options(config, h), "remote_python": h.python, "options": kw})
        return {"scheduler": {"host": hosts[0].name, "address": hosts[0].address, "connect_options": workers[0]["connect_options"],
                              "remote_python": hosts[0].python, "options": sched_kw},
                "workers": workers, "tls": tls_plan(config)}

    def describe(self, config: Config) -> list[str]:
        hosts = hosts_of(config)
        counts = _workers_per_host(config, len(hosts))
        per_host = [str(n) for n in counts] if counts is not None else ["auto"] * len(hosts)
        spread = ", ".join(f"{h}: {n}" for h, n in zip(hosts, per_host))
        return [f"scheduler on {hosts[0]}; worker processes of {task_threads(config)} thread(s) per host: {spread}"]

    def dask_settings(self, config: Config) -> dict[str, Any]:
        # This process's dask config travels to every host: a spill folder made here means nothing there.
        settings: dict[str, Any] = {"distributed.worker.memory.max-spill": False}
        if config.cluster.local_directory == "auto":
            settings["temporary-directory"] = None
        return settings

    def start(self, config: Config) -> RunningCluster:
        """Probe every host, start the scheduler and the workers over SSH, and connect a client."""

        plan = self.plan(config)
        cores = probe_hosts(config)
        security = security_for(config)
        spec = _spec(plan, cores, config)
        logger.info("starting the ssh cluster: %s", plan)
        with contextlib.ExitStack() as undo:
            try:
                cluster = interruptible(lambda: _cluster(spec, security), config.parallel.timeout)
            except Exception as e:  # distributed and asyncssh raise many types for a failed start
                raise ClusterStartError(f"could not start the ssh cluster on {', '.join(config.ssh.hosts)} "
                                        f"({first_cause(e)}); run openclaw doctor to check each host") from e
            undo.callback(cluster.close)
            _drain(cluster)
            try:
                client = new_client(cluster, timeout=config.parallel.timeout, security=security)
            except Exception as e:
                raise ClusterStartError(f"could not connect to the ssh cluster's scheduler ({type(e).__name__}: {e})") from e
            undo.pop_all()
        return DistributedCluster(self, config, client, cluster)

    def worker_plugins(self, config: Config) -> list[Any]:
        return [*super().worker_plugins(config), BlasThreads(blas_threads(config))]


def _spec(plan: dict[str, Any], cores: dict[str, int], config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    """distributed's SSH process specs of ``plan``: the scheduler's and one worker group per host."""
    from distributed.deploy.ssh import Scheduler, Worker

    s = plan["scheduler"]
    scheduler = {"cls": Scheduler, "options": {"address": s["address"], "connect_options": s["connect_options"],
                                               "kwargs": s["options"], "remote_python": s["remote_python"]}}
    workers = {}
    for w in plan["workers"]:
        n = w["n_workers"]
        if n == "auto":
            n = max(1, cores[w["host"]] // config.parallel.omp_threads)
        workers[w["host"]] = {"cls": Worker, "options": {
            "address": w["address"], "connect_options": w["connect_options"], "kwargs": {**w["options"], "n_workers": n},
            "remote_python": w["remote_python"]}}
    return scheduler, workers


def _drain(cluster: Any) -> None:
    """Keep reading what the remote processes write (their logs, at DEBUG here).

    SSHCluster reads each one's output only until it has started; unread, the SSH channel's
    window fills and the remote process blocks on its next log line.
    """
    async def drain(proc: Any, host: str) -> None:
        with contextlib.suppress(Exception):  # the connection closes with the cluster
            async for line in proc.stderr:
                if line.strip():
                    logger.debug("%s: %s", host, line.rstrip())

    for part in (cluster.scheduler, *cluster.workers.values()):
        if getattr(part, "proc", None) is not None:
            cluster.loop.add_callback(drain, part.proc, part.address)


def _cluster(spec: tuple[dict[str, Any], dict[str, Any]], security: Any) -> Any:
    scheduler, workers = spec
    return _nannies_first()(workers, scheduler, security=security, name="openclaw-ssh")


@functools.cache
def _nannies_first() -> type:
    """distributed's ``SpecCluster``, whose close first has the scheduler stop every nanny, and so its worker process.

    Its own close retires the workers (one running a task stays until the task ends) and asks SSH to send a
    signal to each remote process, which did not stop them under Debian's sshd: the session returned in
    20 ms and the remote nannies and workers lived on until their ``death_timeout`` (``parallel.timeout``).
    A nanny told to ``terminate`` stops its worker process as a local one does: within ~4 s, at once if idle.

    A scheduler whose SSH session says its process ended (killed, crashed) is not asked anything: distributed's
    close retried it for ``parallel.timeout`` and logged a traceback. Its workers end on their own once their
    ``death_timeout`` has passed without it. One that only does not answer (a host that went away) is closed
    the way distributed closes it.
    """
    from distributed.core import Status
    from distributed.deploy.spec import SpecCluster

    class SshCluster(SpecCluster):
        async def _close(self) -> None:
            if self.status == Status.running and self.scheduler_comm is not None:
                scheduler = self.scheduler  # distributed.deploy.ssh's Scheduler: its SSH process, once started
                if scheduler is not None and getattr(getattr(scheduler, "proc", None), "returncode", None) is not None:
                    scheduler.status = Status.failed  # its process ended: SpecCluster's close asks it to retire nobody
                    self.shutdown_scheduler = False  # nor to terminate: its SSH session is closed here instead
                    await scheduler.close()
                else:
                    with contextlib.suppress(Exception):  # no answer: distributed's own close, as before
                        await asyncio.wait_for(self.scheduler_comm.identity(), _ALIVE_S)
                        await asyncio.wait_for(self.scheduler_comm.broadcast(
                            msg={"op": "terminate", "reason": "openclaw-close"}, nanny=True, on_error="ignore"), _NANNIES_CLOSE_S)
            await super()._close()

    return SshCluster


# -- probing the hosts -----------------------------------------------------------------------


def probe_hosts(config: Config) -> dict[str, int]:
    """Log in to every host of ``ssh.hosts`` and check its Python; return each host's cores.

    Raises
    ------
    ClusterStartError
        The first host that cannot be reached, refuses the key, has an unknown host key, or whose
        Python cannot import openclaw_dask and distributed: one line naming the host and the fix.
    """
    results = probe_each(config)
    for _, r in results:
        if isinstance(r, str):
            raise ClusterStartError(r)
    return {h.name: int(r) for h, r in results}


def probe_each(config: Config) -> list[tuple[Host, int | str]]:
    """Each host of ``ssh.hosts`` with its cores, or the one line that says why it cannot run workers (all at once)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    hosts = hosts_of(config)
    _import_asyncssh()  # here, where the warnings filter is this thread's to change

    async def all_hosts() -> list[int | str]:
        return list(await asyncio.gather(*(_probe(config, h) for h in hosts)))

    with ThreadPoolExecutor(1, thread_name_prefix="openclaw-ssh-probe") as pool:  # its own loop, even in a notebook
        return list(zip(hosts, pool.submit(asyncio.run, all_hosts()).result()))


def _import_asyncssh() -> None:
    """Import asyncssh without the deprecation warnings its import raises with cryptography 51 (its DSA
    support): they are asyncssh's to fix, and printed ten lines above every command's one-line error."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DSA is deprecated")
        import asyncssh  # noqa: F401


async def _probe(config: Config, host: Host) -> int | str:
    """``host``'s cores, or the one line that says why it cannot run workers."""
    import asyncio

    import asyncssh

    options = _connect_options(config, host)
    where, timeout = f"{host.address}:{options['port']}", config.parallel.timeout
    try:
        async with asyncssh.connect(host.address, **options) as conn:
            done = await asyncio.wait_for(conn.run(f"{shlex.quote(host.python)} -c {shlex.quote(_PROBE)}"), timeout)
    except asyncssh.HostKeyNotVerifiable:
        return (f"ssh {host}: its host key is not in {options['known_hosts']} (ssh.known_hosts); check the key's "
                f"fingerprint with the host's admin, then add it: ssh-keyscan -p {options['port']} {host.address} >> "
                f"{options['known_hosts']}")
    except asyncssh.PermissionDenied:
        keys = ", ".join(options.get("client_keys", [])) or "SSH's default keys"
        user = options.get("username") or "this user"
        return (f"ssh {host}: {where} refused the login of {user} with {keys}; add the public key to "
                f"~/.ssh/authorized_keys there (ssh-copy-id -p {options['port']} {host}), or set ssh.client_keys")
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
        return f"ssh {host}: cannot use a key of ssh.client_keys ({e}); give an unencrypted private key, or load it into ssh-agent"
    except asyncssh.Error as e:
        return f"ssh {host}: {where} ended the SSH session ({shorten(e.reason, 120)}); its sshd log says why"
    except (OSError, asyncio.TimeoutError) as e:  # TimeoutError first: it is an OSError without a strerror
        why = f"no answer within {timeout:g}s" if isinstance(e, asyncio.TimeoutError) else _os_reason(e)
        return (f"ssh {host}: cannot reach {where} ({why}); check that sshd runs there and ssh.hosts and ssh.ssh_port, "
                "or raise parallel.timeout")
    return _python_verdict(host, done)


def _os_reason(error: OSError) -> str:
    """``Connection refused``, ``Name or service not known``: the OS's words, not asyncio's "Connect call failed"."""
    import os

    if error.errno and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or type(error).__name__  # a resolver's (gaierror: negative codes)


def _python_verdict(host: Host, done: Any) -> int | str:
    """The cores the probe printed, or why ``host``'s Python cannot run a worker."""
    err = str(done.stderr or "").strip()
    if done.exit_status == 0:
        try:
            return int(str(done.stdout).split()[-1])
        except (ValueError, IndexError):
            return f"ssh {host}: {host.python} printed {shorten(done.stdout)!r} where its core count was expected"
    if done.exit_status == 127 or "No such file" in err:
        return (f"ssh {host}: there is no {host.python} (ssh.remote_python); install Python with openclaw-dask there, "
                "or set ssh.remote_python to its path")
    missing = err.rpartition("No module named ")[2].strip("'\" ") if "No module named" in err else None
    if missing:
        return (f"ssh {host}: {host.python} cannot import {missing}; install it there: "
                f"{host.python} -m pip install openclaw-dask (the version of this client)")
    last = err.splitlines()[-1] if err else f"exit status {done.exit_status}"
    return f"ssh {host}: {host.python} failed to start ({shorten(last, 120)}); fix its install, or set ssh.remote_python"
