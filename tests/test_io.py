"""Chunked readers (npy, raw, zarr, HDF5, plugins) and async_io's read-ahead."""

from __future__ import annotations

import os
import time
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from openclaw_dask import BackendUnavailable, ConfigError, OpenclawError, ReadError, Session, io, load_config, registry
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


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Entry points of the readers group, as another package would install them (scanned afresh, and again after)."""
    eps = [EntryPoint("txt", "tests.test_io:FakeReader", formats.ENTRY_POINT_GROUP),
           EntryPoint("missing", "tests.test_io:NeedsMissing", formats.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: eps if group == formats.ENTRY_POINT_GROUP else [])
    formats.READERS.refresh()
    yield eps
    monkeypatch.undo()
    formats.READERS.refresh()


def test_readers_come_from_entry_points_and_missing_extras_name_the_install(tmp_path, fake_entry_points):
    assert {"npy", "raw", "zarr", "hdf5", "txt", "missing"} <= set(formats.readers())
    np.savetxt(tmp_path / "m.txt", np.arange(6.0).reshape(3, 2))
    with start() as s:
        x = io.read(s, tmp_path / "m.txt", format="txt")
        np.testing.assert_array_equal(s.compute(x), np.arange(6.0).reshape(3, 2))
        assert io.read(s, tmp_path / "m.txt").shape == (3, 2)  # a plugin's suffix is guessed too
        with pytest.raises(BackendUnavailable, match=r"needs openclaw_no_such_module.*pip install 'openclaw-dask\[io\]'"):
            io.read(s, tmp_path / "m.txt", format="missing")


def test_a_broken_plugin_reader_is_one_line_naming_its_entry_point(fake_entry_points):
    fake_entry_points.append(EntryPoint("tiff", "tests.test_io:NoSuchReader", formats.ENTRY_POINT_GROUP))
    formats.READERS.refresh()
    with pytest.raises(ConfigError) as e:
        formats.reader_for("x.tiff", "tiff")
    assert "\n" not in str(e.value)
    assert "reader tiff failed to load (AttributeError" in str(e.value) and "entry point tests.test_io:NoSuchReader" in str(e.value)


def test_a_plugin_cannot_shadow_a_built_in_reader(fake_entry_points, caplog):
    fake_entry_points.append(EntryPoint("npy", "tests.test_io:FakeReader", formats.ENTRY_POINT_GROUP))
    formats.READERS.refresh()
    assert formats.readers().count("npy") == 1
    assert "ignoring openclaw_dask.readers entry point npy = tests.test_io:FakeReader" in caplog.text
    assert type(formats.reader_for("x.npy")) is formats.NpyReader is type(formats.reader_for("x", "npy"))


def test_io_format_names_come_from_the_readers_installed(fake_entry_points):
    assert load_config(None, {"workload.io_format": "txt"}, env={}).workload.io_format == "txt"
    with pytest.raises(ConfigError, match=r"workload.io_format must be one of npy, raw, zarr, hdf5, txt, missing, got 'tiff'"):
        load_config(None, {"workload.io_format": "tiff"}, env={})


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


# -- corrupted input: one line naming the file, never a wrong array ----------------------------

SMALL = (64, 8)  # 4 KiB of float64


def _small():
    return np.arange(SMALL[0] * SMALL[1], dtype="float64").reshape(SMALL)


def _npy(tmp_path, name="d.npy"):
    path = tmp_path / name
    np.save(path, _small())
    return path


def _npy_with_header(tmp_path, **header):
    """A .npy of SMALL float64 data whose header says ``header`` (descr, shape) instead."""
    import io as _io

    body = _small().tobytes()
    out = _io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False, "shape": SMALL, **header})
    path = tmp_path / "d.npy"
    path.write_bytes(out.getvalue() + body)
    return path


def _cut(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _raw(tmp_path, extra=b""):
    path = tmp_path / "d.raw"
    path.write_bytes(_small().tobytes() + extra)
    return path


def _zarr(tmp_path, zarr_format=3):
    zarr = pytest.importorskip("zarr", reason="zarr is not installed: pip install 'openclaw-dask[io]'")
    path = tmp_path / "d.zarr"
    out = zarr.open_array(str(path), mode="w", shape=SMALL, chunks=(16, 8), dtype="float64", zarr_format=zarr_format)
    out[:] = _small()
    return path


def _zarr_chunk(tmp_path, zarr_format=3):
    path = _zarr(tmp_path, zarr_format)
    return path, path / ("c/1/0" if zarr_format == 3 else "1.0")


def _h5(tmp_path, name="data"):
    h5py = pytest.importorskip("h5py", reason="h5py is not installed: pip install 'openclaw-dask[io]'")
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f[name] = _small()
    return path


def _removed(path):
    path.unlink()
    return path


def _loop(tmp_path, name):
    (tmp_path / f"b-{name}").symlink_to(tmp_path / name)
    (tmp_path / name).symlink_to(tmp_path / f"b-{name}")
    return tmp_path / name


def _garbage(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(bytes(range(256)) * 16)
    return path


def _folder(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def _write(path, data):
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return path


def _group_not_dataset(tmp_path):
    path = _h5(tmp_path)
    import h5py

    with h5py.File(path, "a") as f:
        f.create_group("grp")
    return path


# (case, builder(tmp_path) -> the path that read() is given, read options, what the one line must say)
CORRUPT = [
    ("npy-truncated", lambda t: _cut(_npy(t)), {}, "truncated"),
    ("npy-header-wrong-dtype", lambda t: _npy_with_header(t, descr="<f4"), {}, "header names the wrong dtype or shape"),
    ("npy-header-wrong-dtype-wider", lambda t: _npy_with_header(t, descr="<c16"), {}, "truncated"),
    ("npy-header-shape-larger", lambda t: _npy_with_header(t, shape=(128, 8)), {}, "truncated"),
    ("npy-header-corrupt", lambda t: _write(t / "d.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': ??? }\n"), {}, "header"),
    ("npy-object-dtype", lambda t: _npy_with_header(t, descr="|O"), {}, "Python objects"),
    ("npy-garbage", lambda t: _garbage(t, "d.npy"), {}, "not a .npy file"),
    ("npy-empty", lambda t: _write(t / "d.npy", b""), {}, "empty"),
    ("npy-missing", lambda t: t / "nothing.npy", {}, "no such file"),
    ("npy-dangling-symlink", lambda t: _removed(_npy(t, "gone.npy")) and _link(t / "d.npy", t / "gone.npy"), {}, "symlink to nothing"),
    ("npy-symlink-loop", lambda t: _loop(t, "d.npy"), {}, "symlink loop"),
    ("npy-folder", lambda t: _folder(t, "d.npy"), {}, "a folder, not a file"),
    ("raw-truncated", lambda t: _cut(_raw(t)), {"dtype": "float64", "shape": SMALL}, "truncated, or the shape or dtype is wrong"),
    ("raw-shape-larger", lambda t: _raw(t), {"dtype": "float64", "shape": (128, 8)}, "needs 8192"),
    ("raw-wrong-dtype", lambda t: _raw(t), {"dtype": "float32", "shape": SMALL}, "shape or dtype is wrong"),
    ("raw-not-whole-items", lambda t: _raw(t, b"xyz"), {"dtype": "float64"}, "not a whole number of float64"),
    ("raw-empty", lambda t: _write(t / "d.raw", b""), {"dtype": "float64"}, "empty"),
    ("raw-folder", lambda t: _folder(t, "d.raw"), {"dtype": "float64"}, "a folder, not a file"),
    ("zarr-missing-chunk", lambda t: _removed(_zarr_chunk(t)[1]).parent.parent.parent, {}, "chunk c/1/0 is missing"),
    ("zarr2-missing-chunk", lambda t: _removed(_zarr_chunk(t, 2)[1]).parent, {}, "chunk 1.0 is missing"),
    ("zarr-truncated-chunk", lambda t: _cut(_zarr_chunk(t)[1]).parent.parent.parent, {}, "the data of [0:64, 0:8] is corrupt"),
    ("zarr-garbage-chunk", lambda t: _write(_zarr_chunk(t)[1], bytes(range(200))).parent.parent.parent, {}, "is corrupt (RuntimeError"),
    ("zarr-missing-zarr.json", lambda t: _removed(_zarr(t) / "zarr.json").parent, {}, "metadata"),
    ("zarr-corrupt-zarr.json", lambda t: _write(_zarr(t) / "zarr.json", "{not json").parent, {}, "metadata"),
    ("zarr-zarr.json-of-no-array", lambda t: _write(_zarr(t) / "zarr.json", '{"zarr_format": 3}').parent, {}, "metadata"),
    ("zarr2-missing-.zarray", lambda t: _removed(_zarr(t, 2) / ".zarray").parent, {}, "metadata"),
    ("zarr2-corrupt-.zarray", lambda t: _write(_zarr(t, 2) / ".zarray", "garbage").parent, {}, "metadata"),
    ("zarr-a-file-not-a-store", lambda t: _garbage(t, "d.zarr"), {}, "not a Zarr store"),
    ("zarr-missing", lambda t: t / "nothing.zarr", {}, "no such file"),
    ("zarr-symlink-loop", lambda t: _loop(t, "d.zarr"), {}, "symlink loop"),
    ("hdf5-truncated", lambda t: _cut(_h5(t)), {}, "truncated"),
    ("hdf5-garbage", lambda t: _garbage(t, "d.h5"), {}, "corrupt, or not a hdf5 file"),
    ("hdf5-empty", lambda t: _write(t / "d.h5", b""), {}, "empty"),
    ("hdf5-missing-dataset", lambda t: _h5(t), {"dataset": "other"}, "has no dataset 'other'"),
    ("hdf5-no-dataset", lambda t: _h5(t) and _group_not_dataset(t), {"dataset": "grp"}, "has no dataset 'grp'"),
    ("hdf5-folder", lambda t: _folder(t, "d.h5"), {}, "a folder, not a file"),
]


def _link(link, target):
    link.symlink_to(target)
    return link


@pytest.fixture(scope="module")
def small_session():
    with start() as s:
        yield s


def _read_all(s, path, **options):
    return s.compute(io.read(s, path, **options))


@pytest.mark.parametrize(("builder", "options", "says"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_a_corrupted_input_is_one_line_naming_the_file_never_a_wrong_array(small_session, tmp_path, builder, options, says):
    path = builder(tmp_path)
    with pytest.raises(OpenclawError) as e:
        _read_all(small_session, path, **options)
    line = str(e.value)
    assert "\n" not in line and str(path) in line and says in line, line
    assert len(line) < 500
    assert "; " in line  # what is wrong, then the fix


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root, which reads a file whatever its mode")
def test_an_unreadable_file_is_one_line_naming_it(small_session, tmp_path):
    path = _npy(tmp_path)
    path.chmod(0)
    with pytest.raises(ReadError, match=r"d\.npy: permission denied; make it readable"):
        _read_all(small_session, path)


def test_a_permission_error_is_one_line_naming_the_file_even_as_root(small_session, tmp_path, monkeypatch):
    path = _npy(tmp_path)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(formats, "open", denied, raising=False)  # what open() raises for chmod 000 as a user
    with pytest.raises(ReadError, match=r"d\.npy: permission denied; make it readable by the user the workers run as$"):
        _read_all(small_session, path)


def test_a_file_truncated_after_read_is_caught_in_the_task_that_reads_it(small_session, tmp_path):
    path = _npy(tmp_path)
    x = io.read(small_session, path)
    _cut(path, 0.75)  # after the header was read: the task finds it
    with pytest.raises(ReadError, match=r"d\.npy: its header says <f8 \(64, 8\) \(4096 bytes of data\) but the file holds "
                                        r"\d+ bytes after the header: it is truncated"):
        small_session.compute(x)


def test_read_many_names_the_corrupt_file_among_many(small_session, tmp_path):
    paths = [_npy(tmp_path, f"part{i}.npy") for i in range(4)]
    x = io.read_many(small_session, paths)
    _cut(paths[2])
    with pytest.raises(ReadError, match=r"part2\.npy: its header says"):
        small_session.compute(x)


def test_io_missing_chunks_is_an_error_by_default_and_fill_reads_the_fill_value(tmp_path):
    path, chunk = _zarr_chunk(tmp_path)
    chunk.unlink()
    expected = _small()
    expected[16:32] = 0  # the fill value where chunk c/1/0 was
    with start() as s:
        with pytest.raises(ReadError, match=r"d\.zarr: chunk c/1/0 is missing \(io\.missing_chunks = error\); restore the "
                                            r"chunk, or set io\.missing_chunks: fill"):
            s.compute(io.read(s, path, chunks=(16, 8)).sum())
        # the other chunks still read: the error is for the region that lacks one
        np.testing.assert_array_equal(s.compute(io.read(s, path, chunks=(16, 8))[:16]), expected[:16])
    with start(**{"io.missing_chunks": "fill"}) as s:
        np.testing.assert_array_equal(s.compute(io.read(s, path)), expected)
        np.testing.assert_array_equal(s.compute(io.read_many(s, [path, path])), np.concatenate([expected, expected]))


def test_a_missing_chunk_under_async_io_is_the_same_one_line(tmp_path):
    path, chunk = _zarr_chunk(tmp_path)
    chunk.unlink()
    with start(**{"parallel.async_io": True}) as s:
        x = io.read(s, path, chunks=(16, 8))
        with pytest.raises(ReadError, match=r"d\.zarr: chunk c/1/0 is missing"):
            s.compute(x.sum())


@pytest.mark.timeout(120)
def test_a_read_error_in_a_worker_process_reaches_the_cli_as_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    path, chunk = _zarr_chunk(tmp_path)
    chunk.unlink()
    script = tmp_path / "job.py"
    script.write_text("import openclaw_dask as oc\ns = oc.session()\n"
                      f"print(s.compute(oc.io.read(s, {str(path)!r}, chunks=(16, 8)).sum()))\n")
    openclaw = Path(sys.executable).parent / "openclaw"
    r = subprocess.run([str(openclaw), "run", str(script), "--set", "parallel.backend=process", "--set", "parallel.workers=1",
                        "--set", "cluster.memory_limit=512MiB"], capture_output=True, text=True, timeout=110, check=False,
                       cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert r.stdout == ""  # never a sum
    lines = [line for line in r.stderr.splitlines() if "d.zarr" in line]
    assert lines == [f"openclaw: error: cannot read {path}: chunk c/1/0 is missing (io.missing_chunks = error); restore the "
                     "chunk, or set io.missing_chunks: fill if this store leaves out chunks that hold only the fill value "
                     "(zarr does unless written with write_empty_chunks=True)"], r.stderr
    assert "Traceback" not in r.stderr


def test_a_read_error_pickles_whole():
    import pickle

    e = pickle.loads(pickle.dumps(ReadError("/x/d.npy", "it is empty", "write it again")))
    assert (type(e), str(e), e.path, e.fix) == (ReadError, "cannot read /x/d.npy: it is empty; write it again", "/x/d.npy",
                                                 "write it again")
