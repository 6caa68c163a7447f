from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from openclaw_dask.chunking import DEFAULT_TASK_OVERHEAD_S, MAX_AUTO_CHUNK, min_auto_chunk, plan_chunks
from openclaw_dask.cluster.local import THREADS_TASK_OVERHEAD_S, ProcessBackend, ThreadBackend
from openclaw_dask.cluster.serial import SerialBackend
from openclaw_dask.config import ChunkSize

MiB = 2**20
AUTO = ChunkSize("auto")


def test_bytes_split_axis0_into_balanced_chunks():
    plan = plan_chunks((100 * MiB // 8,), "f8", task_chunk_size=ChunkSize("bytes", 10 * MiB))
    assert plan.n_chunks == 10
    assert plan.chunks[0] == (10 * MiB // 8,) * 10
    assert plan.chunk_bytes == 10 * MiB


def test_chunks_are_balanced_not_remainder():
    plan = plan_chunks((1001,), "f8", task_chunk_size=ChunkSize("elements", 100))
    assert len(plan.chunks[0]) == 11
    assert max(plan.chunks[0]) - min(plan.chunks[0]) <= 1
    assert sum(plan.chunks[0]) == 1001


def test_elements_count_ignores_dtype_width():
    a = plan_chunks((1000,), "f8", task_chunk_size=ChunkSize("elements", 250))
    b = plan_chunks((1000,), "i2", task_chunk_size=ChunkSize("elements", 250))
    assert a.chunks == b.chunks == ((250,) * 4,)


def test_data_splits_rows_model_splits_columns():
    shape, size = (4000, 1000), ChunkSize("bytes", 8 * 1000 * 500)
    data = plan_chunks(shape, "f8", task_chunk_size=size, strategy="data")
    model = plan_chunks(shape, "f8", task_chunk_size=size, strategy="model")
    assert data.chunks == ((500,) * 8, (1000,))
    assert model.chunks == ((4000,), (125,) * 8)
    assert data.chunk_bytes == model.chunk_bytes == 8 * 1000 * 500
    # pipeline streams micro-batches of samples: its arrays are laid out as data's
    assert plan_chunks(shape, "f8", task_chunk_size=size, strategy="pipeline").chunks == data.chunks


def test_row_bigger_than_target_splits_the_next_axis():
    plan = plan_chunks((10, 1000, 1000), "f8", task_chunk_size=ChunkSize("bytes", 8 * 1000 * 250))
    assert plan.chunks == ((1,) * 10, (250,) * 4, (1000,))


def test_whole_array_smaller_than_target_is_one_chunk():
    plan = plan_chunks((10, 10), "f8", task_chunk_size=ChunkSize("bytes", MiB))
    assert plan.chunks == ((10,), (10,))


def test_zero_length_axis():
    plan = plan_chunks((0,), "f8", task_chunk_size=ChunkSize("bytes", MiB))
    assert plan.chunks == ((0,),)


def test_auto_follows_guide_rule_for_large_arrays():
    total = 64 * 2**30  # 64 GiB over 4 slots: guide says 1.6 GiB, capped at MAX_AUTO_CHUNK
    plan = plan_chunks((total // 8,), "f8", task_chunk_size=AUTO, slots=4, task_overhead_s=ThreadBackend.task_overhead_s)
    assert plan.target_bytes == MAX_AUTO_CHUNK
    total = 16 * 2**30  # 16 GiB / (4 x 10) = 410 MiB, between the threaded engine's floor and the cap: the guide's value
    plan = plan_chunks((total // 8,), "f8", task_chunk_size=AUTO, slots=4, task_overhead_s=THREADS_TASK_OVERHEAD_S)
    assert plan.n_chunks == 40 and abs(plan.target_bytes - total / 40) < 8  # whole elements
    assert "auto: 16.00 GiB / (4 slots x 10)" in plan.reason
    # a guide value that is not a whole number of elements still gives exactly slots x 10 chunks
    plan = plan_chunks((2 * 2**30 // 8,), "f8", task_chunk_size=AUTO, slots=2, task_overhead_s=SerialBackend.task_overhead_s)
    assert plan.n_chunks == 20


def test_auto_is_raised_to_the_overhead_floor():
    total = 2 * 2**30
    plan = plan_chunks((total // 8,), "f8", task_chunk_size=AUTO, slots=2, task_overhead_s=ProcessBackend.task_overhead_s)
    floor = min_auto_chunk(ProcessBackend.task_overhead_s)
    assert plan.n_chunks == math.ceil(total / floor) and plan.chunk_bytes <= floor  # as many chunks as the floor allows, evened out
    assert "per-task overhead" in plan.reason
    assert min_auto_chunk(SerialBackend.task_overhead_s) <= min_auto_chunk(ThreadBackend.task_overhead_s)


def test_auto_is_capped_by_worker_memory():
    total = 64 * 2**30
    plan = plan_chunks((total // 8,), "f8", task_chunk_size=AUTO, slots=2, worker_memory=800 * MiB, threads_per_worker=2)
    assert plan.n_chunks == math.ceil(total / (100 * MiB)) and plan.chunk_bytes <= 100 * MiB
    assert "memory per thread / 4" in plan.reason


def test_auto_on_a_gpu_makes_chunks_big_enough_for_its_bandwidth():
    """Seen on an H200: 8 GiB summed through 256 MiB chunks ran at 0.02 of CuPy, each task's ~2.5 ms
    dwarfing its 0.06 ms of work; a GPU engine streams ~1 TB/s a slot, so auto gives it one chunk."""
    from openclaw_dask.cluster.cuda import GPU_STREAM_BYTES_PER_S

    gpu = {"stream_bytes_per_s": GPU_STREAM_BYTES_PER_S, "max_chunk_bytes": 26 * 10**9}
    eight = plan_chunks((2**30,), "f8", task_chunk_size=AUTO, slots=1, task_overhead_s=ProcessBackend.task_overhead_s,
                        worker_memory=125 * 10**9, **gpu)
    assert eight.n_chunks == 1 and "at 1000 GB/s a slot" in eight.reason
    big = plan_chunks((100 * 2**30 // 8,), "f8", task_chunk_size=AUTO, slots=1, task_overhead_s=ProcessBackend.task_overhead_s,
                      worker_memory=125 * 10**9, **gpu)
    assert big.chunk_bytes <= 26 * 10**9 and big.n_chunks == 5 and "the largest auto chunk" in big.reason
    cpu = plan_chunks((2**30,), "f8", task_chunk_size=AUTO, slots=1, task_overhead_s=ProcessBackend.task_overhead_s)
    assert cpu.chunk_bytes <= MAX_AUTO_CHUNK  # a CPU engine keeps its own rate and cap


def test_auto_gives_every_slot_a_chunk():
    plan = plan_chunks((MiB // 8,), "f8", task_chunk_size=AUTO, slots=4, task_overhead_s=ProcessBackend.task_overhead_s)
    assert plan.n_chunks == 4


@pytest.mark.parametrize("shape", [(7,), (13, 17), (5, 6, 7)])
@pytest.mark.parametrize("strategy", ["data", "model"])
def test_chunks_cover_the_shape(shape, strategy):
    plan = plan_chunks(shape, "f4", task_chunk_size=ChunkSize("bytes", 40), strategy=strategy)
    assert tuple(sum(c) for c in plan.chunks) == shape
    assert plan.chunk_bytes <= max(40, np.dtype("f4").itemsize)
    assert plan.n_chunks == math.prod(len(c) for c in plan.chunks)


@pytest.mark.parametrize(("total", "slots"), [(2**30, 2), (3 * 2**30, 4), (10**9, 3)])
def test_auto_chunk_count_is_a_multiple_of_slots(total, slots):
    plan = plan_chunks((total // 8,), "f8", task_chunk_size=AUTO, slots=slots, task_overhead_s=ThreadBackend.task_overhead_s)
    assert plan.n_chunks % slots == 0
    assert max(plan.chunks[0]) - min(plan.chunks[0]) <= 1


@pytest.mark.parametrize("slots", [3, 5, 7])
def test_one_chunk_per_slot_even_when_the_share_is_not_whole_elements(slots):
    plan = plan_chunks((33554432,), "f8", task_chunk_size=ChunkSize("auto"), slots=slots, task_overhead_s=DEFAULT_TASK_OVERHEAD_S)
    assert len(plan.chunks[0]) == slots and sum(plan.chunks[0]) == 33554432


def test_auto_handles_empty_arrays_and_keeps_the_cap_when_rounding_down():
    assert plan_chunks((0,), "f8", task_chunk_size=ChunkSize("auto"), slots=2).n_chunks == 1
    # floor 256 MiB, cap 300 MiB (1200 MiB / 4): 7 chunks at the floor; rounding down to 4 would make
    # 448 MiB chunks, over the cap, so it rounds up to 8 instead
    plan = plan_chunks((1792 * MiB // 8,), "f8", task_chunk_size=ChunkSize("auto"), slots=4, task_overhead_s=0.01,
                       worker_memory=1200 * MiB, threads_per_worker=1)
    assert plan.n_chunks == 8 and plan.chunk_bytes <= 300 * MiB


@given(total=st.integers(1, 2**40), slots=st.integers(1, 64), overhead=st.sampled_from([0.0002, 0.0008, 0.0027]))
def test_the_auto_note_ends_on_the_size_the_chunks_have(total, slots, overhead):
    """The run summary printed "raised to 205.00 MiB" beside "4 x 256 MiB": the note must reach the size it explains."""
    from dask.utils import format_bytes

    plan = plan_chunks((total,), "u1", task_chunk_size=AUTO, slots=slots, task_overhead_s=overhead)
    assert plan.reason.split(" to ")[-1].startswith(format_bytes(plan.target_bytes)) or \
        plan.reason.endswith(f"= {format_bytes(plan.target_bytes)}"), plan.reason
