"""Dataflow beyond one graph: pipelines of micro-batches, iterative work with fewer syncs, batched maps, fusion.

Each works on any session: a distributed cluster, the thread backend's threaded
scheduler, or serial.

- :func:`pipeline` (``strategy: pipeline``; ``batch_size``): dependent stages with
  micro-batches in flight, bounded by ``in_flight``.
- :func:`iterate` (``sync_interval``): k local steps per shard between global syncs.
- :func:`map`: many small Python calls in tasks sized to keep scheduling under 5%.
- :mod:`~openclaw_dask.dataflow.fusion` (``fusion_buffer_size``): reductions' fan-in and
  small chunks merged up to a buffer.
"""

from __future__ import annotations

from openclaw_dask.dataflow import fusion
from openclaw_dask.dataflow.batched import BatchPlan, map, plan_batches
from openclaw_dask.dataflow.iterate import Iterated, iterate, mean_state
from openclaw_dask.dataflow.pipeline import Pipeline, Stage, StageTimes, pipeline

__all__ = [
    "BatchPlan",
    "Iterated",
    "Pipeline",
    "Stage",
    "StageTimes",
    "fusion",
    "iterate",
    "map",
    "mean_state",
    "pipeline",
    "plan_batches",
]
