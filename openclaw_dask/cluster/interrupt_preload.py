"""Worker preload (``distributed.worker.preload``): worker processes openclaw starts ignore SIGINT.

Ctrl-C in a terminal reaches every process of the foreground group. The session in the
main process unwinds and closes its cluster, and the nannies stop their workers; a worker
that took the signal itself would die mid-task with a traceback first. The process backend
starts its worker processes with SIGINT blocked already (``cluster/local.py``), so a Ctrl-C
during their start cannot reach them either; this makes it ignored for good. Imported in the
worker process's main thread, before the worker starts; it also quiets the log lines of a
worker's own teardown (:mod:`~openclaw_dask.cluster.quiet`).
"""

from __future__ import annotations

import signal
import threading

from openclaw_dask.cluster import quiet

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
quiet.install()
