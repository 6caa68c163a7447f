"""Blocks that a worker process reads straight out of the worker holding them (issue 26, goal 2:
:mod:`~openclaw_dask.cluster.peer_reads`), instead of over loopback TCP.

The serializer's receipt and its read are checked in this process (a process may read itself) on
fuzzed shapes, dtypes and layouts; what it leaves to the next family, and a holder that is gone, as
pure functions; and a process session's all-to-all, whose blocks are read by the workers, against NumPy.
"""

from __future__ import annotations

import os
import subprocess
import sys

import dask.array as da
import distributed.worker
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import openclaw_dask
from openclaw_dask.cluster import peer_reads, pulled

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process_vm_readv is Linux's")


@pytest.fixture
def small(monkeypatch):
    """Every block large enough for the receipt, so small fuzzed arrays exercise it."""
    monkeypatch.setattr(peer_reads, "MIN_BYTES", 1)
    monkeypatch.setattr(peer_reads, "_MIN_RUN", 1)


def _layouts(a: np.ndarray):
    yield a
    yield np.asfortranarray(a)
    yield a.T
    if a.ndim and a.shape[0] > 2:
        yield a[1:-1]
        yield a[::-2]
    if a.ndim > 1 and a.shape[-1] > 2:
        yield a[..., 1:]  # rows are runs, but not one run together
        yield a[..., ::2]  # no runs at all: the next family's


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=hnp.arrays(st.sampled_from(["<f8", "<f4", "<i8", "u1", "<c16", "?", "<M8[ns]", "S3"]),
                    hnp.array_shapes(min_dims=1, max_dims=3, max_side=9)))
def test_a_block_read_by_its_receipt_equals_the_block_in_every_layout(small, a):
    for x in _layouts(a):
        try:
            header, frames = peer_reads._dumps(x)
        except NotImplementedError:
            assert x.strides[-1] != x.itemsize and (x.ndim == 1 or x.strides[0] != x.itemsize)
            continue
        assert frames == []  # nothing of the block itself travels
        got = peer_reads._loads(header, frames)
        assert got.shape == x.shape and got.dtype == x.dtype
        np.testing.assert_array_equal(got, x)


def test_what_is_not_a_plain_array_of_a_megabyte_goes_to_the_next_family():
    big = np.zeros(2**20 // 8, dtype=np.float64)
    for x in (big[:-1],  # under a MiB
              np.empty(2**18, dtype=object),
              np.zeros(2**17, dtype=[("a", "<f8"), ("b", "<f8")]),
              np.ma.masked_array(np.zeros(2**18)),
              np.zeros((2**16, 64))[:, ::2],  # no runs
              np.zeros((2**18, 4), dtype=np.float64)[:, :1],  # runs of 8 bytes: the iovecs would cost more
              np.float64(1.0)):
        with pytest.raises(NotImplementedError):
            peer_reads._dumps(x)
    header, _ = peer_reads._dumps(big)
    assert header["receipt"][0] == os.getpid()


def test_a_holder_that_is_gone_is_an_oserror_not_a_wrong_block():
    """distributed counts an ``OSError`` as a failed transfer and asks again; the memory of another process is never read."""
    block = np.arange(2**18, dtype=np.float64)
    header, frames = peer_reads._dumps(block)
    stale = {**header, "receipt": [header["receipt"][0], header["receipt"][1] + 1, *header["receipt"][2:]]}
    with pytest.raises(OSError, match="is gone"):
        peer_reads._loads(stale, frames)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    dead = {**header, "receipt": [int(done.stdout), *header["receipt"][1:]]}
    with pytest.raises(OSError):
        peer_reads._loads(dead, frames)


def test_a_worker_asks_this_way_only_if_it_read_every_peer_whole(monkeypatch):
    me = pulled.probe()
    monkeypatch.setattr(distributed.worker, "get_data_from_worker", peer_reads._ORIGINAL)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    for peer in ((int(gone.stdout), *me[1:]),  # a process that has ended
                 (os.getppid(), me[1] + 1, *me[2:])):  # one that is not the process it was when it was asked
        assert not peer_reads._ask_if_all_read([me, peer])
        assert distributed.worker.get_data_from_worker is peer_reads._ORIGINAL
    assert peer_reads._ask_if_all_read([me])  # itself only: nothing to read
    assert distributed.worker.get_data_from_worker is peer_reads._asking
    peer_reads._ask(False)
    assert distributed.worker.get_data_from_worker is peer_reads._ORIGINAL


def _asking() -> bool:
    return distributed.worker.get_data_from_worker is peer_reads._asking


def test_a_process_sessions_workers_read_each_others_blocks_and_the_answers_are_numpys():
    with openclaw_dask.session(backend="process", workers=2, timeout="30s") as s:
        if not all(s.client.run(_asking).values()):
            pytest.skip("the workers may not read each other's memory here (ptrace_scope, seccomp)")
        x = s.persist(da.random.default_rng(7).random((2048, 2048), chunks=(512, 2048)))  # row blocks of 8 MiB, on both workers
        a = s.compute(x)
        before = s.client.run(peer_reads.reads_done)
        # column blocks, transposed: each is made of 2 MiB pieces of every row block, on both workers
        got = s.compute((x.rechunk((2048, 512)).T * 2).sum(axis=1), x.astype(np.float32).rechunk((2048, 1024)).T)
        after = s.client.run(peer_reads.reads_done)
    np.testing.assert_allclose(got[0], (a.T * 2).sum(axis=1))
    np.testing.assert_array_equal(got[1], a.astype(np.float32).T)
    assert sum(after[w]["blocks"] - before[w]["blocks"] for w in after) > 0
