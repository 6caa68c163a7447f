"""Chunked readers (npy, raw, zarr, HDF5, plugins) and async_io's read-ahead."""

from __future__ import annotations

import time
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from openclaw_dask import BackendUnavailable, ConfigError, Session, io, load_config
from openclaw_dask.io import formats, prefetch
from openclaw_dask.io.prefetch import Prefetcher
from openclaw_dask.workloads.streams import write_array

SHAPE = (4096, 64)  # 2 MiB of float64


def start(**overrides):
    return Session(load_config(None, {"parallel.task_chunk_size": "256KiB", **overrides})).start()


@pytest.fixture
def expected():
    return np.arange(SHAPE[0] * SHAPE[1], dtype="float64").reshape(SHAPE)


@pytest.mark.parametrize(("fmt", "suffix", "options"), [
    ("npy", ".npy", {}),
    ("raw", ".raw", {"dtype": "float64", "shape": SHAPE}),
    ("zarr", ".zarr", {}),
    ("hdf5", ".h5", {}),
])
def test_each_format_reads_back_chunked_by_task_chunk_size(tmp_path, expected, fmt, suffix, options):
    path = write_array(tmp_path / f"data{suffix}", fmt, SHAPE, 1000)
    with start() as s:
        x = io.read(s, path, **options)
        assert x.chunks == s.chunks(SHAPE, "float64") and x.npartitions == 8  # 2 MiB / 256 KiB
        np.testing.assert_array_equal(s.compute(x), expected)


def test_a_raw_file_without_dtype_and_an_unknown_suffix_are_refused(tmp_path):
    write_array(tmp_path / "data.raw", "raw", SHAPE, 1000)
    (tmp_path / "data.xyz").write_bytes(b"")
    with start() as s:
        with pytest.raises(ConfigError, match="its dtype is unknown; pass dtype="):
            io.read(s, tmp_path / "data.raw")
        with pytest.raises(ConfigError, match="cannot tell the format of .*data.xyz.*pass format="):
            io.read(s, tmp_path / "data.xyz")
        with pytest.raises(ConfigError, match="format 'tiff' is not known"):
            io.read(s, tmp_path / "data.raw", format="tiff")
        x = io.read(s, tmp_path / "data.raw", dtype="float64")  # 1-D from the file size
        assert x.shape == (SHAPE[0] * SHAPE[1],)


def test_an_hdf5_file_with_several_datasets_needs_one_named(tmp_path):
    import h5py

    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a"], f["b"] = np.ones(10), np.zeros(10)
    with start() as s:
        with pytest.raises(ConfigError, match=r"holds datasets \['a', 'b'\]; pass dataset="):
            io.read(s, tmp_path / "two.h5")
        assert s.compute(io.read(s, tmp_path / "two.h5", dataset="a").sum()) == 10


class FakeReader(formats.Reader):
    """A plugin format: whitespace-separated text, one row per line."""

    name, suffixes = "txt", (".txt",)

    def open(self, path, **options):
        return np.loadtxt(path, ndmin=2)


class NeedsMissing(formats.Reader):
    name, module, extra = "missing", "openclaw_no_such_module", "io"


def test_readers_come_from_entry_points_and_missing_extras_name_the_install(tmp_path, monkeypatch):
    eps = [EntryPoint("txt", "tests.test_io:FakeReader", formats.ENTRY_POINT_GROUP),
           EntryPoint("missing", "tests.test_io:NeedsMissing", formats.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(formats, "entry_points", lambda group: eps if group == formats.ENTRY_POINT_GROUP else [])
    assert {"npy", "raw", "zarr", "hdf5", "txt", "missing"} <= set(formats.readers())
    np.savetxt(tmp_path / "m.txt", np.arange(6.0).reshape(3, 2))
    with start() as s:
        x = io.read(s, tmp_path / "m.txt", format="txt")
        np.testing.assert_array_equal(s.compute(x), np.arange(6.0).reshape(3, 2))
        with pytest.raises(BackendUnavailable, match=r"needs openclaw_no_such_module.*pip install 'openclaw-dask\[io\]'"):
            io.read(s, tmp_path / "m.txt", format="missing")


# -- async_io ----------------------------------------------------------------------------------


def test_the_prefetcher_reads_ahead_in_either_direction_within_depth():
    inflight, peak = [0], [0]

    def read(i):
        inflight[0] += 1
        peak[0] = max(peak[0], inflight[0])
        time.sleep(0.002)
        inflight[0] -= 1
        return i

    p = Prefetcher(read, 20, 3)
    try:
        assert [p.get(i) for i in range(20)] == list(range(20))
        assert p.stats.ahead == 19 and p.stats.waited == 1 and len(p._pending) == 0
        assert peak[0] <= 3  # never more reads at once than its I/O threads
        assert [p.get(i) for i in range(20)] == list(range(20))  # a second pass (another compute) reads ahead too
        assert p.stats.ahead == 19 + 19
    finally:
        p.close()
    back = Prefetcher(lambda i: i, 10, 2)
    try:
        assert [back.get(i) for i in range(9, -1, -1)] == list(range(9, -1, -1))
        assert back.stats.ahead >= 8
    finally:
        back.close()


def test_the_prefetcher_holds_at_most_depth_blocks_and_drops_what_others_took():
    p = Prefetcher(lambda i: i, 100, 4)
    try:
        for i in (0, 10, 20, 30):  # another process took the blocks between
            p.get(i)
            assert len(p._pending) <= 4
        assert p.stats.dropped >= 8
    finally:
        p.close()


def test_async_io_reads_ahead_on_io_threads_and_gives_the_same_answer(tmp_path, expected):
    path = write_array(tmp_path / "data.npy", "npy", SHAPE, 1000)
    with start(**{"parallel.async_io": True}) as s:
        x = io.read(s, path, latency=0.01)
        assert s.compute(x.sum()) == expected.sum()
        stats = [p.stats for p in prefetch._OPEN.values() if p.n == x.npartitions and p.depth == 2]
        assert stats and stats[-1].ahead >= x.npartitions - 2
    with start() as s:
        before = len(prefetch._OPEN)
        assert s.compute(io.read(s, path).sum()) == expected.sum()
        assert len(prefetch._OPEN) == before  # off: every task reads its own chunk


@pytest.mark.parametrize("fmt", ["npy", "raw", "zarr", "hdf5"])
def test_the_io_pipeline_workload_is_correct_in_every_format(fmt):
    from openclaw_dask.workloads import WORKLOADS

    with start(**{"parallel.async_io": True, "workload.io_format": fmt, "workload.read_latency": 0.001}) as s:
        r = WORKLOADS["io-pipeline"](s, size=2 * 2**20, repeat=1)
    assert r.ok, r.check
    rows = dict(r.rows)
    assert rows["async_io"].startswith("reads on I/O threads") and "1 ms per read standing in for network storage" in rows["file"]
