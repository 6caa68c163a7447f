"""Worker preload (``distributed.worker.preload``): worker processes openclaw starts ignore SIGINT.

Ctrl-C in a terminal reaches every process of the foreground group. The session in the
main process unwinds and closes its cluster, and the nannies stop their workers; a worker
that took the signal itself would die mid-task with a traceback first. Imported in the
worker process's main thread, before the worker starts.
"""

from __future__ import annotations

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
