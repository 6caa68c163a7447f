"""Large array results that reach the client's memory without the comm (issue 26, goal 2): read out
of the worker processes (:mod:`~openclaw_dask.cluster.pulled`), or written by them into the client's buffer.

One process session per way; the size from which an array takes the shared path is lowered to
64 KiB so that small arrays exercise it. Every result is checked against NumPy, in any chunking,
dtype and layout; a result's buffer is reused only once nothing of the user's can see it; a failed
compute never lends its buffer again; closing the session gives every buffer back. Read out of the
workers: every block is let go after its compute, failed or not, and a worker that is gone before
its blocks are read has the array computed again.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import signal
import time

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import openclaw_dask
from openclaw_dask.cluster import compute, here, pulled, shared_results
from openclaw_dask.errors import RunError

pytestmark = pytest.mark.filterwarnings("ignore::dask.array.core.PerformanceWarning")  # small chunks, on purpose


@pytest.fixture(scope="module", params=["read", "written"])
def session(request):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared_results, "MIN_BYTES", 64 * 2**10)
        with openclaw_dask.session(backend="process", workers=2, timeout="30s") as s:
            with pytest.MonkeyPatch.context() as probe:  # only for the probe: other tests' sessions run meanwhile
                if request.param == "written":  # as where this process may not read its workers' memory
                    probe.setattr(pulled, "workers_readable", lambda client: False)
                s.compute(da.ones(2**14, chunks=2**13))  # the first large result decides the way
            if request.param == "read" and not s.running.results.pulled:
                pytest.skip("this process may not read its workers' memory here (ptrace_scope, seccomp)")
            assert s.running.results.pulled == (request.param == "read")
            yield s


def _held(s) -> list[int]:
    """Blocks each worker holds for the client to read."""
    return list(s.client.run(lambda: sum(map(len, pulled._HELD.values()))).values())


def _shared(result: np.ndarray) -> bool:
    """The result lies in a shared buffer (an ``mmap``), not in arrays gathered over the comm."""
    base = result
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, mmap.mmap)


def _buffers(s) -> list:
    results = s.running.results
    return results._lent + results._free


def test_a_large_array_comes_back_through_shared_memory_and_equals_numpy(session):
    a = np.arange(300 * 200, dtype=np.float64).reshape(300, 200)
    x = da.from_array(a, chunks=(70, 90))
    y = (x * 2 + 1).T
    r = session.compute(y)
    assert _shared(r) and r.flags.writeable
    np.testing.assert_array_equal(r, (a * 2 + 1).T)


def test_a_kernel_s_numpy_reference_runs_on_memory_of_numpy_s_own_not_on_a_shared_result(session):
    from openclaw_dask.workloads.prepared import Prepared, own_memory

    x = session.persist(da.arange(2**14, chunks=2**12) * 1.0)
    fetched = session.to_numpy(x)
    assert _shared(fetched)  # as worker processes hand a large result back: a shared file's 4 KiB pages
    prepared = Prepared(lambda x: x.sum(), np.sum, (x,), x.nbytes, accuracy=lambda a: None)
    (host,) = prepared.host_inputs(session)
    assert not _shared(host) and host.base is None and np.array_equal(host, np.arange(2**14))  # NumPy's, to time NumPy on
    for view in (fetched, fetched[5:90], fetched[::3]):
        assert not _shared(own_memory(view)) and np.array_equal(own_memory(view), view)
    plain = np.arange(8.0)
    assert own_memory(plain) is plain and own_memory(plain[2:]).base is plain  # NumPy's already: no copy


def test_small_and_object_arrays_keep_the_comm_and_a_mix_is_right_in_order(session):
    big = da.arange(50_000, chunks=12_345, dtype=np.int64)
    small = da.arange(10, chunks=3)
    words = da.from_array(np.array(["a", "bc"] * 5000, dtype=object), chunks=3000)
    r_small, r_big, r_words = session.compute(small, big, words)
    assert _shared(r_big) and not _shared(r_small) and not _shared(r_words)
    np.testing.assert_array_equal(r_big, np.arange(50_000))
    np.testing.assert_array_equal(r_small, np.arange(10))
    assert list(r_words[:3]) == ["a", "bc", "a"]


def test_a_buffer_is_lent_again_only_when_nothing_of_the_user_s_sees_it(session):
    x = da.ones((256, 256), chunks=100)
    first = session.compute(x)
    address = first.__array_interface__["data"][0]
    view = first[10:20]
    del first
    held = session.compute(x + 1)  # the first buffer is still seen through the view
    assert held.__array_interface__["data"][0] != address
    np.testing.assert_array_equal(view, 1)
    del view
    again = session.compute(x + 2)  # now it is free
    assert again.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(again, 3)
    np.testing.assert_array_equal(held, 2)  # and the one held was not written over


def test_a_compute_that_fails_never_lends_its_buffer_again(session):
    def boom(block):
        if block[0, 0] > 100:
            raise ValueError("planted")
        return block

    x = da.arange(256 * 256, dtype=np.float64).reshape(256, 256).rechunk(64)
    before = {id(b) for b in _buffers(session)}
    with pytest.raises((RunError, ValueError), match="planted"):
        session.compute(x.map_blocks(boom))
    assert {id(b) for b in _buffers(session)} <= before
    np.testing.assert_array_equal(session.compute(x), np.arange(256 * 256).reshape(256, 256))
    assert _held(session) == [0, 0]


def test_a_block_that_is_not_a_plain_array_comes_over_the_comm_in_its_place(session):
    a = np.arange(300 * 100, dtype=np.float64).reshape(300, 100)
    masked = da.from_array(a, chunks=(70, 100)).map_blocks(lambda b: np.ma.masked_less(b, 50), meta=np.empty((0, 0)))
    r = session.compute(masked)
    assert _shared(r)
    np.testing.assert_array_equal(r, a)  # its values, at their place, as a written block's
    assert _held(session) == [0, 0]


def test_every_block_is_let_go_after_its_compute_even_one_whose_task_ends_after_a_failure(session):
    if not session.running.results.pulled:
        pytest.skip("the workers write their blocks: nothing is held")
    x = da.arange(8 * 2**14, dtype=np.float64, chunks=2**14)
    np.testing.assert_array_equal(session.compute(x * 2), np.arange(8 * 2**14) * 2.0)
    assert _held(session) == [0, 0]

    def late_or_boom(block):
        if block[0] == 0:
            raise ValueError("planted")
        time.sleep(0.3)  # still running when the compute has failed and let go
        return block

    with pytest.raises((RunError, ValueError), match="planted"):
        session.compute(x.map_blocks(late_or_boom))
    deadline = time.monotonic() + 10
    while any(session.client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _held(session) == [0, 0]


def test_results_over_a_quarter_of_the_workers_memory_are_written_as_they_are_made_not_held_to_be_read():
    from distributed import get_task_stream

    with openclaw_dask.session(backend="process", workers=1, memory_limit="256MiB", timeout="30s") as s:
        ways = []
        for mib in (8, 80):  # the room to read is 64 MiB
            x = da.arange(mib * 2**17, dtype=np.float64, chunks=2**20)
            sent: list[dict] = []  # tasks run straight on the workers (cluster/direct.py), beside the scheduler's
            with get_task_stream(s.client) as ts, here.streamed(sent.extend):
                np.testing.assert_array_equal(s.compute(x + 1), np.arange(mib * 2**17) + 1.0)
            ways.append({str(t["key"][0]).split("-")[0] for t in [*ts.data, *sent]} & {"hold_block", "write_block"})
        if not s.running.results.pulled:
            pytest.skip("this process may not read its workers' memory here (ptrace_scope, seccomp)")
        assert s.running.results.read_room == 64 * 2**20
        assert ways == [{"hold_block"}, {"write_block"}]


def test_an_array_whose_worker_is_gone_before_it_is_read_is_computed_again():
    read = compute._read

    def killed_first(reads, data):  # a worker dies between the compute and the read of its blocks
        if not reads:  # the compute again, over the comm
            return read(reads, data)
        receipt = data[next(iter(reads))][0].flat[0]
        os.kill(receipt.pid, signal.SIGKILL)
        while pulled._started(receipt.pid) == receipt.started:
            time.sleep(0.01)
        return read(reads, data)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared_results, "MIN_BYTES", 1)
        with openclaw_dask.session(backend="process", workers=2, timeout="30s") as s:
            a = np.arange(6000, dtype=np.int64)
            np.testing.assert_array_equal(s.compute(da.from_array(a, chunks=1000)), a)
            if not s.running.results.pulled:
                pytest.skip("this process may not read its workers' memory here (ptrace_scope, seccomp)")
            mp.setattr(compute, "_read", killed_first)
            r = s.compute(da.from_array(a, chunks=1000) + 1)
            np.testing.assert_array_equal(r, a + 1)
            assert not _shared(r)  # gathered over the comm, from the workers left


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.lists(st.integers(1, 60), min_size=1, max_size=3), dtype=st.sampled_from(["f8", "f4", "i2", "u1", "c16", "?"]),
       data=st.data())
def test_any_chunking_dtype_and_layout_comes_back_exactly(session, shape, dtype, data):
    rng = np.random.default_rng(len(shape))
    a = (rng.standard_normal(shape) * 50).astype(dtype)
    # at most 6 chunks an axis: a graph of a few hundred tasks, not of one per element
    chunks = tuple(data.draw(st.integers(-(-n // 6), n), label=f"chunk {i}") for i, n in enumerate(shape))
    x = da.from_array(a, chunks=chunks)
    axes = data.draw(st.permutations(range(len(shape))), label="axes")
    # reversed axes: blocks that are views with negative strides, read (or written) row by row
    flips = tuple(slice(None, None, -1) if data.draw(st.booleans(), label=f"reverse {i}") else slice(None) for i in range(len(shape)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared_results, "MIN_BYTES", 1)  # every array here, however small
        r = session.compute(x[flips].transpose(axes))
    assert _shared(r)
    np.testing.assert_array_equal(r, a[flips].transpose(axes))


def test_closing_the_session_closes_every_buffer_and_a_held_result_stays_readable_until_dropped():
    def fds() -> int:  # this process's open result buffers
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed since the listing (the listing's own, say)
                n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:openclaw-result")
        return n

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shared_results, "MIN_BYTES", 1)
        gc.collect()  # an earlier test's result held by garbage in a cycle would close its buffer mid-test
        before = fds()
        with openclaw_dask.session(backend="process", workers=1, timeout="30s") as s:
            kept = s.compute(da.arange(1000, chunks=300))
            s.compute(da.arange(2000, chunks=300))
            assert len(_buffers(s)) == 2
            assert fds() > before  # each buffer: its file, and the mmap's own copy of it
        assert fds() == before + 1  # the held result's mapping, and its copy of the file
        np.testing.assert_array_equal(kept, np.arange(1000))
        del kept
        assert fds() == before



def test_a_worker_process_is_told_by_its_start_time_as_well_as_its_pid():
    started = pulled._started(os.getpid())
    assert started > 0 and pulled._started(os.getpid()) == started
    assert pulled._started(2**22 + 1) == -1  # above Linux's largest pid: no such process
    with pytest.raises(OSError, match="is gone"):
        pulled._same(os.getpid(), started + 1)
