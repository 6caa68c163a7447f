"""``slurm``: worker processes in batch jobs of a Slurm cluster, through dask-jobqueue's ``SLURMCluster``.

The scheduler and the client run in this process (on the login node); each worker job runs
``python -m distributed.cli.dask_worker`` on a compute node and connects back. :meth:`SlurmBackend.plan`
maps the configuration onto ``SLURMCluster``'s keywords (pure: ``openclaw slurm script`` prints the job
script from it, with no Slurm needed):

- ``parallel.workers`` -> worker processes, in ``workers / slurm.processes_per_job`` jobs;
- ``omp_threads`` (and ``hybrid``) -> ``--cpus-per-task`` (processes x omp_threads), each worker's
  ``--nthreads`` and ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/``OPENBLAS_NUM_THREADS``, as on the
  process backend;
- ``cluster.memory_limit`` -> each worker's ``--memory-limit``; the job's ``--mem`` is that times its
  processes (``auto``: :data:`AUTO_MEMORY_PER_CORE` per core);
- ``parallel.network_interface`` -> ``--interface`` of the scheduler and workers; ``cluster.host`` -> the
  scheduler's address; ``cluster.local_directory`` -> the workers' ``--local-directory`` on the node;
- ``parallel.timeout`` -> ``--death-timeout`` and the comm timeouts (``DASK_*`` variables in the job);
- TLS certificate files (on a file system the nodes share) -> the workers' ``--tls-*`` options;
- ``slurm.*`` -> ``#SBATCH`` lines (``-p``, ``-A``, ``--qos``, ``-t``, ``-o``/``-e``), the prologue, the Python.

Closing the session (normal exit, an error, Ctrl-C, SIGTERM: the session unwinds) cancels every job
it submitted; :class:`SlurmCluster` runs ``scancel`` on any the cluster's own close left behind.
``elastic.adaptive`` submits and cancels whole jobs (:class:`~openclaw_dask.cluster.adaptive.JobAdaptive`).
Inside a step of ``srun -n N`` nothing is submitted: the step's tasks are the cluster
(:mod:`openclaw_dask.cluster.slurm_tasks`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster.base import Backend, Capabilities
from openclaw_dask.cluster.client import DistributedCluster, new_client
from openclaw_dask.cluster.network import protocol
from openclaw_dask.cluster.running import RunningCluster
from openclaw_dask.cluster.security import security_for, tls_plan
from openclaw_dask.cluster.slurm_tasks import allocation_step, check_in_allocation, join, scheduler_options
from openclaw_dask.cluster.worker_shape import blas_env, task_threads
from openclaw_dask.config import changed_from_defaults
from openclaw_dask.errors import ClusterStartError, ConfigError, ResizeError, first_line

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["AUTO_MEMORY_PER_CORE", "SlurmBackend", "SlurmCluster", "job_script"]

logger = logging.getLogger("openclaw_dask.cluster")

AUTO_MEMORY_PER_CORE = 2 * 2**30  # cluster.memory_limit auto: a worker gets 2 GiB per core (a common DefMemPerCPU)
JOB_NAME = "openclaw-worker"
REPLACE_EVERY = 2.0  # seconds between two looks at the queue for jobs that ended under a running session
PLACEHOLDER = "tcp://SCHEDULER-ADDRESS:PORT"  # what a printed script shows where a session puts its scheduler's address
# Keys that describe this machine's worker processes and have no job counterpart: refused when set.
_LOCAL_ONLY = ("cluster.max_spill", "cluster.preload")


def _walltime(seconds: float) -> str:
    """Slurm's ``[D-]HH:MM:SS``, rounded up to the second."""
    s = int(-(-seconds // 1))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def _jobs(config: Config) -> int:
    """Worker jobs: ``parallel.workers / slurm.processes_per_job``, which must divide."""
    workers, per_job = config.parallel.workers, config.slurm.processes_per_job
    if workers == "auto":
        raise ConfigError.at(config, "parallel.workers", "backend slurm needs a number of worker processes to submit jobs for",
                             hint="e.g. --set parallel.workers=8")
    if workers % per_job:
        raise ConfigError.at(config, "parallel.workers", f"is not a multiple of slurm.processes_per_job ({per_job}): "
                             "every job runs that many workers", hint=f"e.g. --set parallel.workers={per_job * max(1, workers // per_job)}")
    return workers // per_job


def _check_adaptive(config: Config) -> None:
    """``elastic.adaptive`` submits and cancels whole jobs: its bounds are numbers of workers that fill whole jobs."""
    e, per_job = config.elastic, config.slurm.processes_per_job
    if not e.adaptive:
        return
    if e.max_workers == "auto":
        raise ConfigError.at(config, "elastic.max_workers", "backend slurm needs a largest number of workers to submit jobs for "
                             "(auto means this machine's cores)", hint=f"e.g. --set elastic.max_workers={4 * per_job}")
    for key, n in (("elastic.min_workers", e.min_workers), ("elastic.max_workers", e.max_workers)):
        if n % per_job:
            raise ConfigError.at(config, key, f"is not a multiple of slurm.processes_per_job ({per_job}): adaptive scaling "
                                 "submits and cancels whole jobs", hint=f"e.g. --set {key}={per_job * max(1, n // per_job)}")


def _prologue(config: Config) -> list[str]:
    """``export`` lines for the job: BLAS threads, the dask settings every process of a session takes, then the user's."""
    from openclaw_dask.cluster.settings import dask_settings

    settings = {"logging.distributed": config.parallel.log_level.lower()}
    settings.update((k, v) for k, v in dask_settings(config, SlurmBackend()).items()
                    if ".pre-spawn-environ." not in k and not k.startswith("distributed.comm.tls.")
                    and k != "distributed.comm.require-encryption")  # TLS travels as the workers' --tls-* options
    # dask reads a variable's value as a Python literal: lists in JSON's spelling stay readable in the script
    env = {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): json.dumps(list(value)) if isinstance(value, (list, tuple))
           else str(value) for key, value in settings.items()}
    env.update(blas_env(config))
    return [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())] + list(config.slurm.job_script_prologue)


def _directives(config: Config) -> list[str]:
    """``#SBATCH`` lines beyond those ``SLURMJob`` writes itself."""
    s = config.slurm
    lines = [f"--qos={s.qos}"] if s.qos else []
    if s.log_directory:  # written here, not by dask-jobqueue, which would make the folder even for a printed script
        folder = config.resolve_path("slurm.log_directory")
        lines += [f"-o {folder}/{JOB_NAME}-%j.out", f"-e {folder}/{JOB_NAME}-%j.err"]
    return lines + list(s.job_extra_directives)


def _memory(config: Config) -> int:
    """Bytes per worker process: ``cluster.memory_limit``, or :data:`AUTO_MEMORY_PER_CORE` per core."""
    limit = config.cluster.memory_limit
    return AUTO_MEMORY_PER_CORE * config.parallel.omp_threads if limit == "auto" else limit


class SlurmBackend(Backend):
    """``slurm``: worker processes in Slurm batch jobs (dask-jobqueue); scheduler and client in this process."""

    name = "slurm"
    capabilities = Capabilities(worker_processes=True, tls=True, jobs=True, resize=True, adapt=True)
    why_not = MappingProxyType({
        "prometheus": "openclaw's metrics are not tested on backend slurm yet; remove it",
        "socket_buffers": "socket buffer sizes on the compute nodes are not set by openclaw",
    })
    requires = ("distributed", "dask_jobqueue")
    extra = "slurm"

    def check(self, config: Config) -> None:
        super().check(config)
        p = config.parallel
        step = allocation_step()
        if step is not None:
            check_in_allocation(config, step)
        else:
            _jobs(config)
        if p.communication not in ("auto", "tcp", "tls"):
            raise ConfigError.at(config, "parallel.communication", "worker jobs connect with tcp:// (or tls://) addresses",
                                 hint="use auto, tcp or tls")
        if config.security.temporary_certificates:
            raise ConfigError.at(config, "security.temporary_certificates", "certificates kept in this process's memory "
                                 "cannot reach a batch job", hint="set security.ca_file, cert_file and key_file on a "
                                 "file system the compute nodes share")
        _check_adaptive(config)
        changed = changed_from_defaults(config, _LOCAL_ONLY)
        if changed:
            raise ConfigError.at(config, changed[0], "describes processes on this machine; a worker job's are set by "
                                 "the slurm section", hint="remove it (slurm.job_script_prologue runs commands in the job)")

    def plan(self, config: Config) -> dict[str, Any]:
        """``SLURMCluster``'s keyword arguments for ``config`` (nothing is started, nothing is written)."""
        p, c, s = config.parallel, config.cluster, config.slurm
        per_job = s.processes_per_job
        return {
            "n_workers": _jobs(config) * per_job, "processes": per_job, "job_name": JOB_NAME,
            "cores": per_job * task_threads(config), "job_cpu": per_job * p.omp_threads,
            "memory": f"{per_job * _memory(config)}B", "walltime": _walltime(s.walltime),
            "queue": s.partition, "account": s.account, "job_extra_directives": _directives(config),
            "job_script_prologue": _prologue(config), "python": s.job_python or sys.executable,
            "death_timeout": int(-(-p.timeout // 1)), "interface": p.network_interface,
            "local_directory": None if c.local_directory == "auto" else c.local_directory,
            "protocol": protocol(config, self) + "://", "security": tls_plan(config),
            "scheduler_options": scheduler_options(config),
            "silence_logs": getattr(logging, p.log_level),
        }

    def describe(self, config: Config) -> list[str]:
        step = allocation_step()
        if step is not None:
            where = f"inside Slurm step {step.id}: scheduler in task 0, this run in task 1, {step.tasks - 2} worker task(s)"
            return [f"{where}; no job is submitted"]
        kw = self.plan(config)
        jobs = kw["n_workers"] // kw["processes"]
        from dask.utils import format_bytes

        memory = format_bytes(kw["processes"] * _memory(config))
        what = f"{jobs} Slurm job(s) of {kw['job_cpu']} core(s), {memory} memory, walltime {kw['walltime']}"
        return [f"{what}, partition {kw['queue'] or '(default)'} (openclaw slurm script prints the job script)"]

    def start(self, config: Config) -> RunningCluster:
        """Start the scheduler here, submit the worker jobs, and wait until their workers have joined.

        Inside a step of ``srun -n N`` nothing is submitted: the step's tasks are the cluster
        (:mod:`openclaw_dask.cluster.slurm_tasks`); only task 1 returns from here.
        """

        step = allocation_step()
        if step is not None:
            return join(self, config, step)

        SLURMCluster = _jobqueue().SLURMCluster
        kwargs = self.plan(config)
        kwargs["security"] = security_for(config)
        if config.slurm.log_directory:
            Path(config.resolve_path("slurm.log_directory") or ".").mkdir(parents=True, exist_ok=True)
        logger.info("starting a Slurm cluster: %s", kwargs)
        n = kwargs.pop("n_workers")
        with contextlib.ExitStack() as undo:  # an error or Ctrl-C before the session holds it cancels what was submitted
            try:
                cluster = SLURMCluster(**kwargs)
            except Exception as e:  # dask-jobqueue checks its keywords in many ways
                raise ClusterStartError(f"could not set up the Slurm worker jobs ({first_line(e)})") from e
            undo.callback(_cancel_all, cluster)
            _submit(cluster, n // kwargs["processes"])
            client = new_client(cluster, timeout=config.parallel.timeout, security=kwargs["security"])
            undo.callback(client.close)
            _wait_for_workers(cluster, client, n)
            undo.pop_all()
        return SlurmCluster(self, config, client, cluster)


class SlurmCluster(DistributedCluster):
    """A ``SLURMCluster`` and its client; a job that leaves the queue while the session runs is replaced.

    Closing also cancels any job the cluster's own close left in the queue.
    """

    def __init__(self, backend: Backend, config: Config, client: Any, cluster: Any) -> None:
        import threading

        super().__init__(backend, config, client, cluster)
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._replacer = threading.Thread(target=self._replace_lost, name="openclaw-slurm-replace", daemon=True)
        self._replacer.start()

    def _replace_lost(self) -> None:
        """Every :data:`REPLACE_EVERY` s: a job Slurm no longer runs (walltime, ``scancel``, a node lost) gets a successor."""
        from distributed.core import Status

        while not self._stop.wait(REPLACE_EVERY):
            with self._lock:
                queued = _queued(("PENDING", "RUNNING", "CONFIGURING"))
                gone = [name for name, job in list(self.cluster.workers.items())
                        if queued is not None and job.job_id and str(job.job_id) not in queued and name in self.cluster.worker_spec]
                if not gone or self._stop.is_set():
                    continue
                for name in gone:
                    job = self.cluster.workers.pop(name)
                    job.status = Status.closed  # it has ended; SpecCluster's close asserts that of every job it made
                    logger.warning("Slurm job %s (worker %s) left the queue; submitting a replacement", job.job_id, name)
                try:
                    self.cluster.sync(self.cluster._correct_state)  # starts a job for each spec without one
                except Exception as e:  # noqa: BLE001  (a refused sbatch: the run goes on with fewer workers, said once)
                    logger.warning("could not submit a replacement job (%s)", first_line(e))

    def scale(self, n: int) -> Callable[[], bool]:
        with self._lock:
            return self._scaled(n)

    def adapt(self) -> Callable[[], None]:
        """``elastic.adaptive`` in whole jobs (:class:`~openclaw_dask.cluster.adaptive.JobAdaptive`); returns its stop."""
        from openclaw_dask.cluster.adaptive import adapt

        return adapt(self.cluster, self.config, per_job=self.config.slurm.processes_per_job).stop

    def _scaled(self, n: int) -> Callable[[], bool]:
        """Submit or cancel whole jobs: the workers of leaving jobs retire first (their data moves), then ``scancel``."""
        per = self.config.slurm.processes_per_job
        if n % per:
            raise ResizeError(f"resize_workers({n}) refused: backend slurm adds and removes whole jobs of "
                              f"slurm.processes_per_job = {per} workers; ask for a multiple of {per}")
        jobs, cluster = n // per, self.cluster
        leaving = {str(name) for name in list(cluster.worker_spec)[jobs:]}  # the newest jobs go first, as SpecCluster's scale
        names = [w["name"] for w in self.workers().values() if str(w.get("name")).rsplit("-", 1)[0] in leaving
                 or str(w.get("name")) in leaving]
        if names:
            self.client.retire_workers(names=names)
        if leaving:
            cluster.sync(_drop, cluster, leaving)
        _submit(cluster, jobs)  # a job sbatch refuses is one line here too
        return lambda: len(cluster.workers) == jobs

    def close(self) -> None:
        if self.closed:
            return
        self._stop.set()
        self._replacer.join(timeout=60)
        ids = _job_ids(self.cluster)
        super().close()
        _scancel(ids)


def _jobqueue() -> Any:
    """``dask_jobqueue``, imported with this process's Ctrl-C handler kept.

    Its ``runner`` module, imported with the package, sets SIGINT to ``sys.exit()``: Ctrl-C would
    end a run with status 0 and no word, instead of openclaw's one line and 130.
    """
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        import dask_jobqueue
        import dask_jobqueue.slurm
    finally:
        if main:
            signal.signal(signal.SIGINT, before)
    return dask_jobqueue


async def _drop(cluster: Any, names: set[str]) -> None:
    """Remove these jobs' specs and let the cluster close them (dask-jobqueue cancels each with ``scancel``)."""
    for name in list(cluster.worker_spec):
        if str(name) in names:
            del cluster.worker_spec[name]
    await cluster._correct_state()


def _submit(cluster: Any, jobs: int) -> None:
    """Submit ``jobs`` worker jobs and wait for ``sbatch``; its refusal (a partition, an account) is one line.

    ``scale`` submits in the background, where a refused ``sbatch`` is only logged (and tried again)
    and the session would wait for workers that never come: the specs are added here, and the
    submission awaited.
    """
    async def submit() -> None:
        while len(cluster.worker_spec) < jobs:
            cluster.worker_spec.update(cluster.new_worker_spec())
        await cluster._correct_state()

    try:
        cluster.sync(submit)
    except RuntimeError as e:  # dask-jobqueue's failed command: its stderr holds sbatch's own words
        from distributed.core import Status

        for name, job in list(cluster.workers.items()):  # never submitted: nothing to cancel; the close would hang on them
            if getattr(job, "job_id", None) is None:
                job.status = Status.failed
                cluster.workers.pop(name, None)
                cluster.worker_spec.pop(name, None)
        said = [line.strip() for line in str(e).splitlines() if "error:" in line]
        raise ClusterStartError(f"sbatch refused the worker jobs ({'; '.join(said) or first_line(e)}); check the "
                                "script with: openclaw slurm script ... | sbatch --test-only") from None


def _job_ids(cluster: Any) -> list[str]:
    """The Slurm job ids of the cluster's worker jobs that were submitted."""
    return [str(job.job_id) for job in list(cluster.workers.values()) if getattr(job, "job_id", None)]


def _scancel(ids: list[str]) -> None:
    if ids:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


def _cancel_all(cluster: Any) -> None:
    ids = _job_ids(cluster)
    with contextlib.suppress(Exception):
        cluster.close()
    _scancel(ids)


def _queued(states: tuple[str, ...] = ()) -> set[str] | None:
    """Ids of this user's jobs that Slurm still knows (in ``states``; default: any), or ``None`` if squeue did not answer."""
    which = ["-t", ",".join(states)] if states else []
    try:
        out = subprocess.run(["squeue", "--me", "-h", "-o", "%i", *which], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return set(out.stdout.split())


def _wait_for_workers(cluster: Any, client: Any, n: int, poll: float = 1.0) -> None:
    """Until ``n`` workers have joined; a job that leaves the queue before its workers joined ends the wait in one line."""
    while len(client.scheduler_info(n_workers=-1)["workers"]) < n:
        time.sleep(poll)
        joined = {w.get("name") for w in client.scheduler_info(n_workers=-1)["workers"].values()}
        queued = _queued()
        for name, job in list(cluster.workers.items()):
            done = queued is not None and job.job_id and str(job.job_id) not in queued
            if done and not any(str(w).startswith(str(name)) for w in joined):
                raise ClusterStartError(f"Slurm job {job.job_id} ended before its worker joined the scheduler; its output "
                                        "says why (slurm.log_directory, or slurm-JOBID.out where openclaw ran)")


def job_script(config: Config) -> str:
    """The job script a session of ``config`` submits for each worker job (pure; needs dask-jobqueue, not Slurm).

    The scheduler's address is known only once a session starts it: the script shows
    :data:`PLACEHOLDER` there.
    """
    SlurmBackend().available()
    SLURMJob = _jobqueue().slurm.SLURMJob
    kwargs = SlurmBackend().plan(config)
    job = {k: v for k, v in kwargs.items() if k not in ("n_workers", "scheduler_options", "silence_logs", "security")}
    if kwargs["security"] is not None:
        job["security"] = security_for(config)
    return str(SLURMJob(PLACEHOLDER, name=f"{JOB_NAME}-0", **job).job_script())


def script_text(path: Any = None, overrides: dict[str, Any] | None = None) -> str:
    """The job script of the config at ``path`` with ``overrides``, checked as backend slurm (``openclaw slurm script``)."""
    from openclaw_dask.cluster.registry import check
    from openclaw_dask.config import load_config

    config = load_config(path, overrides, override_label="--set")
    check(config)
    head = "# the job script each worker job of a session runs; the session fills in its scheduler's address\n"
    text = job_script(config)
    shebang, _, rest = text.partition("\n")
    return f"{shebang}\n{head}{rest}".rstrip("\n") + "\n"



COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")


def _command(argv: list[str], timeout: float, stdin: bytes | None = None) -> tuple[bool, str]:
    """``(ran and exited 0, stdout or the first line of what went wrong)``."""
    try:
        out = subprocess.run(argv, capture_output=True, timeout=timeout, input=stdin, check=False)
    except subprocess.TimeoutExpired:
        return False, f"{argv[0]} gave no answer within {timeout:g}s"
    except OSError as e:
        return False, f"{argv[0]}: {e.strerror}"
    text = (out.stdout if out.returncode == 0 else out.stderr or out.stdout).decode(errors="replace").strip()
    return out.returncode == 0, text if out.returncode == 0 else (text.splitlines() or [f"exit {out.returncode}"])[0]


def probe(config: Config) -> list[tuple[str, str, str]]:
    """What ``openclaw doctor`` reports for backend slurm: ``(status, found, fix)`` rows (runs Slurm's and munge's commands).

    Slurm's commands on the PATH; the controller answering ``sinfo``; ``slurm.partition`` among its
    partitions; a munge credential made and read back on the socket Slurm's ``AuthInfo`` names.
    """
    import shutil

    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        fix = "run on a login node of the cluster (or module load slurm); Debian: apt-get install slurm-client"
        return [("fail", f"Slurm's commands not found: {', '.join(missing)}", fix)]
    wait = max(config.parallel.timeout, 1.0)
    answered, text = _command(["sinfo", "-h", "-o", "%P"], wait)
    if not answered:
        return [("fail", f"the Slurm controller did not answer sinfo: {text}", "check SLURM_CONF and that slurmctld runs")]
    partitions = [p.rstrip("*") for p in text.split()]
    rows = [("ok", f"sinfo answered: partitions {', '.join(text.split())} (* = default)", "")]
    want = config.slurm.partition
    if want is not None and want not in partitions:
        rows.append(("fail", f"slurm.partition = {want} is not a partition of this cluster", f"use one of {', '.join(partitions)}"))
    elif want is not None:
        rows.append(("ok", f"partition {want} exists", ""))
    return rows + [_munge(wait)]


def _munge(wait: float) -> tuple[str, str, str]:
    """A munge credential made and decoded, on the socket Slurm's ``AuthInfo`` names (munged's default otherwise)."""
    import re
    import shutil

    if shutil.which("munge") is None or shutil.which("unmunge") is None:
        return ("warn", "munge's commands are not installed here, so munge was not tried", "apt-get install munge")
    _, shown = _command(["scontrol", "show", "config"], wait)
    socket_path = re.search(r"AuthInfo\s*=.*?socket=([^,\s]+)", shown)
    where = ["--socket", socket_path.group(1)] if socket_path else []
    made, credential = _command(["munge", "-n", *where], wait)
    if not made:
        fix = "start munged (systemctl start munge), with the key the cluster's nodes share"
        return ("fail", f"munge could not make a credential: {credential}", fix)
    read, text = _command(["unmunge", *where], wait, stdin=credential.encode())
    if not read:
        return ("fail", f"munge could not read its own credential back: {text}", "check munged's key and clock")
    return ("ok", "munge made a credential and read it back" + (f" (socket {socket_path.group(1)})" if socket_path else ""), "")
