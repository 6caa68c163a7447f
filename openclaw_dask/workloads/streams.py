"""Kernels that stream: a staged ``pipeline`` of micro-batches, and ``io-pipeline`` over files it writes.

``pipeline`` pushes samples (128 x 128 float64 images, seeded by their index) through
load -> preprocess -> compute -> reduce with :func:`openclaw_dask.dataflow.pipeline`:
``parallel.batch_size`` samples per micro-batch, at most ``in_flight`` batches alive.

``io-pipeline`` writes a float64 array whose elements are their own index in
``workload.io_format`` to a temporary folder (removed afterwards), reads it back with
:func:`openclaw_dask.io.read` (``parallel.async_io``; ``workload.read_latency`` stands in for
network storage) and reduces it, so the answer has a closed form.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from openclaw_dask import memory_model
from openclaw_dask.errors import ConfigError
from openclaw_dask.workloads import accuracy
from openclaw_dask.workloads.prepared import Prepared

if TYPE_CHECKING:
    from openclaw_dask.cluster import SessionLike

__all__ = ["io_bound", "io_pipeline", "pipeline", "pipeline_bound", "write_array"]

SIDE = 128  # a sample is SIDE x SIDE float64
SAMPLE_BYTES = SIDE * SIDE * 8
_WEIGHTS = np.random.default_rng(7).standard_normal((SIDE, SIDE)) / np.sqrt(SIDE)
REFERENCE_BATCH = 64  # samples per step of the NumPy reference, whatever batch_size the stream used


@memory_model.allocates(output=1)  # the samples, then their stack
def load(batch: list[int]) -> np.ndarray:
    """Samples ``batch`` (their indices), each a pseudo-random image seeded by its index alone."""
    return np.stack([np.random.default_rng(i).random((SIDE, SIDE)) for i in batch])


@memory_model.allocates(inputs=2)  # std's x - mean and its square; then x - mean beside the result
def preprocess(x: np.ndarray) -> np.ndarray:
    """Standardise each sample."""
    return (x - x.mean(axis=(1, 2), keepdims=True)) / x.std(axis=(1, 2), keepdims=True)


@memory_model.allocates(output=1)  # x @ W, then its tanh
def compute(x: np.ndarray) -> np.ndarray:
    return np.tanh(x @ _WEIGHTS)


def reduce(x: np.ndarray) -> np.ndarray:
    return x.sum(axis=(0, 1))


STAGES: tuple[Callable[[Any], Any], ...] = (load, preprocess, compute, reduce)


def _numpy_pipeline(n: int) -> np.ndarray:
    total = np.zeros(SIDE)
    for start in range(0, n, REFERENCE_BATCH):
        x = list(range(start, min(n, start + REFERENCE_BATCH)))
        for stage in STAGES:
            x = stage(x)
        total += x
    return total


def pipeline_bound(n: int) -> accuracy.Bound:
    """How far two sums of ``n`` samples through :data:`STAGES` may be apart, per output column.

    Standardising ``x`` (``S^2`` elements a sample) gives ``z`` within ``e_z (1 + |z|)``, with
    ``e_z = gamma(S^2 + 6) max(1, mean|x| / std)``: the mean is a sum of ``S^2`` terms; the std's
    relative error is that of a sum of squares (the mean's error only moves it to second order).
    ``z @ W`` adds ``gamma(S) |z||W|``; ``tanh`` moves no value further apart and adds its ULPs;
    the sum over all ``N = n S`` rows, in any batching, adds ``gamma(N) sum|tanh|`` (Higham,
    Lemma 3.1, (3.13), (4.4)). The terms' magnitudes are recomputed here, sample by sample.
    """
    spread, a_terms, t_terms = 1.0, np.zeros(SIDE), np.zeros(SIDE)
    for start in range(0, n, REFERENCE_BATCH):
        x = load(list(range(start, min(n, start + REFERENCE_BATCH))))
        spread = max(spread, float(np.max(np.abs(x).mean(axis=(1, 2)) / x.std(axis=(1, 2)))))
        z = np.abs(preprocess(x))
        a_terms += ((1.0 + z) @ np.abs(_WEIGHTS)).sum(axis=(0, 1))
        t_terms += np.abs(compute(preprocess(x))).sum(axis=(0, 1))
    e_z = accuracy.gamma(SIDE * SIDE + 6) * spread
    rows = n * SIDE
    allowed = 2 * ((e_z + accuracy.gamma(SIDE)) * a_terms + (accuracy.LIBM_ULPS * accuracy.EPS + accuracy.gamma(rows)) * t_terms)
    allowed *= 1 + accuracy.gamma(rows + 4)
    return accuracy.Bound(allowed, a_terms + t_terms, f"2(e_z+γ_S)Σ(1+|z|)|W| + 2γ_N·Σ|tanh|, N={rows}")


def pipeline(s: SessionLike, size: int) -> Prepared:
    """Micro-batches through dependent stages (``strategy: pipeline``), in flight together."""
    from openclaw_dask.dataflow import pipeline as stream

    n = max(2, size // SAMPLE_BYTES)
    batch = s.config.parallel.batch_size or max(1, 2 * 2**20 // SAMPLE_BYTES)  # default: 2 MiB batches
    last: dict[str, Any] = {}

    def run(progress: bool) -> np.ndarray:
        with memory_model.streamed(s) as projected:  # the profile compares the stream's projection with its peak
            last["stream"] = flow = stream(s, STAGES, range(n), batch_size=batch, progress=progress)
            total = sum(flow, np.zeros(SIDE))
            projected(flow)
        return total

    def details() -> list[tuple[str, str]]:
        flow = last["stream"]
        mib = batch * SAMPLE_BYTES / 2**20
        rows = [("stream", f"{n} samples in {flow.batches} batches of {batch} ({mib:.3g} MiB), {flow.wall_s:.2f} s"),
                ("in flight", (f"at most {flow.peak_in_flight} of {flow.in_flight} batches alive "
                              f"(<= {flow.in_flight * mib:.3g} MiB of samples)")),
                ("tasks", flow.note or f"{flow.group} batch(es) per task")]
        rows += [(f"stage {t.stage}", (f"median {t.median_s * 1e3:.2f} ms, max {t.max_s * 1e3:.2f} ms, "
                                      f"total {t.total_s:.2f} s over {len(t.seconds)} batches")) for t in flow.times]
        return rows

    return Prepared(lambda: None, lambda: _numpy_pipeline(n), (), n * SAMPLE_BYTES, 4.0 * n * SIDE**3,
                    accuracy=lambda: pipeline_bound(n), run=run, details=details)


def write_array(path: Path, fmt: str, shape: tuple[int, int], rows_per_write: int) -> Path:
    """Write a float64 array whose elements are their flat index, ``rows_per_write`` rows at a time, in format ``fmt``."""
    from openclaw_dask import io

    with io.reader_for(path, fmt).writing(str(path), shape, "float64", rows_per_write) as out:
        for start in range(0, shape[0], rows_per_write):
            stop = min(shape[0], start + rows_per_write)
            out[start:stop] = np.arange(start * shape[1], stop * shape[1], dtype="float64").reshape(stop - start, shape[1])
    return path


def _free_disk_check(folder: str, nbytes: int) -> None:
    free = shutil.disk_usage(folder).free
    if nbytes > free // 2:
        raise ConfigError(f"io-pipeline would write {nbytes / 2**30:.3g} GiB to {folder}, which has "
                          f"{free / 2**30:.3g} GiB free; lower --size (it may use at most half the free space)")


def _reduce_block(x: np.ndarray) -> np.ndarray:
    return (x * 2.0 + np.sin(x) ** 2 + np.cos(x) ** 2).sum()


def io_pipeline(s: SessionLike, size: int) -> Prepared:
    """Files written in ``workload.io_format``, read back chunked (``async_io``) and reduced."""
    from openclaw_dask import io

    cfg = s.config
    cols = 1024
    n_rows = max(2, size // (8 * cols))
    n = n_rows * cols
    folder = tempfile.mkdtemp(prefix="openclaw-io-")
    try:
        _free_disk_check(folder, 8 * n)
        fmt = io.reader_for(folder, cfg.workload.io_format)
        slab = max(1, 64 * 2**20 // (8 * cols))
        path = write_array(Path(folder) / f"data{fmt.suffixes[0] if fmt.suffixes else ''}", fmt.name, (n_rows, cols), slab)
        options: dict[str, Any] = {"dtype": "float64", "shape": (n_rows, cols)} if fmt.headerless else {}
        x = io.read(s, path, latency=cfg.workload.read_latency, **options)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise

    def numpy_reference() -> float:
        reader = io.reader_for(path, cfg.workload.io_format)
        return float(sum(_reduce_block(reader.read(str(path), slice(a, a + slab), **options))
                         for a in range(0, n_rows, slab)))

    def details() -> list[tuple[str, str]]:
        latency = f", plus {cfg.workload.read_latency * 1e3:g} ms per read standing in for network storage" \
            if cfg.workload.read_latency else ""
        expected = float(n) * (n - 1) + n
        return [("file", f"{cfg.workload.io_format}, {8 * n / 2**20:.4g} MiB, read in {x.npartitions} chunks{latency}"),
                ("async_io", "reads on I/O threads, ahead of compute" if cfg.parallel.async_io else "off: each task reads its chunk"),
                ("closed form", f"sum(2x + sin^2 x + cos^2 x) = n(n-1) + n = {expected:.17g}")]

    return Prepared(lambda: _graph(x), numpy_reference, (), 8 * n, 8.0 * n, accuracy=lambda: io_bound(n), details=details,
                    close=lambda: shutil.rmtree(folder, ignore_errors=True))


def io_bound(n: int) -> accuracy.Bound:
    """``sum(2x + sin^2 x + cos^2 x)`` over ``x = 0 .. n-1``, in any chunking: terms of magnitude at most ``2|x| + 2``.

    Each term takes two roundings and the squares of two library calls (``2 LIBM_ULPS + 1`` ULPs each);
    the sum of the chunks' partial sums adds ``n - 1`` roundings (Higham, (4.4)).
    """
    return accuracy.sum_of(float(n) * (n - 1) + 2.0 * n, n, ops=2, ulps=2 * accuracy.LIBM_ULPS + 1)


@memory_model.allocates(inputs=2)  # 2 * x and sin(x) (then cos(x)) beside the block: NumPy reuses the rest in place
def _partial(block: np.ndarray) -> np.ndarray:
    return np.atleast_2d(_reduce_block(block))


def _graph(x: Any) -> Any:
    """One partial per chunk, then their sum: each task reads a chunk and reduces it."""
    return x.map_blocks(_partial, chunks=(1, 1), dtype="float64").sum()
