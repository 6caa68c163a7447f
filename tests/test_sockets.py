"""``parallel.socket_buffer_size``: SO_SNDBUF / SO_RCVBUF read back with getsockopt on live comms."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path

import dask
import numpy as np
import pytest

import openclaw_dask
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster import sockets
from openclaw_dask.cluster.settings import dask_settings
from openclaw_dask.errors import ConfigError

ASK = 2**20  # 1MiB: under the usual net.core.*mem_max (4MiB here), over the defaults (128KiB / 16KiB)

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sysctls and doubling")


def cfg(**overrides):
    return load_config(None, overrides, env={})


def _cap(option: str) -> int:
    return int(Path(f"/proc/sys/net/core/{option}").read_text())


def expected(size: int = ASK) -> tuple[int, int]:
    """(SO_SNDBUF, SO_RCVBUF) as Linux's getsockopt reports them: twice what it granted, capped by *mem_max."""
    return 2 * min(size, _cap("wmem_max")), 2 * min(size, _cap("rmem_max"))


def bufs(comm) -> tuple[int, int]:
    sock = comm.stream.socket
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def _worker_sockets(dask_worker) -> dict:
    """Inside a worker: its backend, its stream to the scheduler, pooled outgoing comms and comms it serves."""
    from distributed.comm.registry import backends

    return {
        "backend": type(backends["tcp"]).__name__,
        "scheduler": bufs(dask_worker.batched_stream.comm),
        "pooled": [bufs(c) for comms in dask_worker.rpc.available.values() for c in comms],
        "served": [bufs(c) for c in dask_worker._comms if hasattr(c, "stream")],
    }


def _transfer(client) -> None:
    """Make one worker fetch a chunk from another, so a worker-to-worker comm exists."""
    a, b = sorted(client.scheduler_info(n_workers=-1)["workers"])
    x = client.submit(np.ones, 1_000_000, workers=[a], pure=False)
    assert client.submit(np.sum, x, workers=[b], pure=False).result() == 1_000_000


# -- live clusters -----------------------------------------------------------------------


@linux
def test_process_backend_sizes_every_comm_of_client_scheduler_and_workers():
    with openclaw_dask.session(backend="process", workers=2, socket_buffer_size="1MiB", memory_limit="1GiB") as s:
        want = expected()
        assert bufs(s.client.scheduler_comm.comm) == want  # client -> scheduler (connected)
        scheduler = s.cluster.scheduler
        accepted = [bufs(b.comm) for b in [*scheduler.stream_comms.values(), *scheduler.client_comms.values()]]
        assert len(accepted) == 3 and set(accepted) == {want}  # scheduler's ends (accepted)
        _transfer(s.client)
        seen = s.client.run(_worker_sockets)
        assert [w["backend"] for w in seen.values()] == ["SizedTCPBackend"] * 2  # the preload reached them
        for w in seen.values():
            assert w["scheduler"] == want
            assert set(w["pooled"] + w["served"]) == {want}
        # the fetching worker keeps its comm to the other pooled; the other serves it
        assert sum(len(w["pooled"]) for w in seen.values()) >= 1
        assert sum(len(w["served"]) for w in seen.values()) >= 1


@linux
def test_thread_backend_over_tcp_sizes_its_comms():
    with openclaw_dask.session(backend="thread", communication="tcp", workers=2, socket_buffer_size="1MiB") as s:
        assert s.client.scheduler.address.startswith("tcp://127.0.0.1:")
        want = expected()
        assert bufs(s.client.scheduler_comm.comm) == want
        (seen,) = s.client.run(_worker_sockets).values()
        assert seen["scheduler"] == want and set(seen["served"]) <= {want}
        assert {bufs(b.comm) for b in s.cluster.scheduler.stream_comms.values()} == {want}
        assert dask.config.get(sockets.CONFIG_KEY) == ASK
    assert dask.config.get(sockets.CONFIG_KEY, None) is None  # restored on close


@linux
def test_without_the_key_sockets_keep_the_os_default():
    # installed or not, an unset key leaves sockets alone
    with sockets.installed(), openclaw_dask.session(backend="process", workers=1, memory_limit="1GiB") as s:
        assert dask.config.get(sockets.CONFIG_KEY, None) is None
        client_side = bufs(s.client.scheduler_comm.comm)
        (seen,) = s.client.run(_worker_sockets).values()
        assert seen["backend"] == "TCPBackend"  # no preload asked for
        for pair in (client_side, seen["scheduler"]):
            assert pair[0] != expected()[0] and pair[1] != expected()[1]


@linux
def test_a_capped_size_is_granted_partly_with_one_warning(caplog, monkeypatch):
    monkeypatch.setattr(sockets, "_warned", set())
    ask = 2 * _cap("rmem_max")
    if ask > 256 * 2**20:
        pytest.skip("net.core.rmem_max is above what the config accepts")
    caplog.set_level(logging.WARNING, logger="openclaw_dask")
    for _ in range(2):
        with socket.socket() as sock:
            granted = sockets.size_socket(sock, ask)
    assert granted["SO_RCVBUF"] == _cap("rmem_max") < ask
    warnings = [r.getMessage() for r in caplog.records if "SO_RCVBUF" in r.getMessage()]
    assert len(warnings) == 1 and "net.core.rmem_max" in warnings[0] and "\n" not in warnings[0]


def test_a_refused_connect_is_distributeds_own_comm_error():
    from distributed.comm import CommClosedError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the connect: nothing listens there
    with dask.config.set({sockets.CONFIG_KEY: ASK}), pytest.raises(CommClosedError, match="ConnectionRefusedError"):
        asyncio.run(sockets.SizedTCPConnector().connect(f"127.0.0.1:{port}"))


def test_install_is_idempotent():
    from distributed.comm.registry import backends

    before = backends["tcp"]
    with sockets.installed():
        first = backends["tcp"]
        sockets.install()
        assert backends["tcp"] is first and isinstance(first, sockets.SizedTCPBackend)
    assert backends["tcp"] is before


# -- settings and refusals ---------------------------------------------------------------


INTERRUPT = "openclaw_dask.cluster.interrupt_preload"  # process workers ignore Ctrl-C: their session stops them
PLACEMENT = "openclaw_dask.cluster.placement"  # every scheduler started under these settings


def test_settings_add_the_size_and_append_the_preload():
    user = {"dask.distributed.worker.preload": ["mymod"]}
    s = dask_settings(cfg(backend="process", socket_buffer_size="1MiB", **user))
    assert s[sockets.CONFIG_KEY] == ASK
    assert s["distributed.worker.preload"] == ["mymod", INTERRUPT, "dask.array", sockets.PRELOAD]
    assert s["distributed.scheduler.preload"] == [PLACEMENT, sockets.PRELOAD] and s["distributed.nanny.preload"] == [sockets.PRELOAD]
    plain = dask_settings(cfg(backend="process"))
    assert sockets.CONFIG_KEY not in plain and plain["distributed.worker.preload"] == [INTERRUPT, "dask.array"]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"backend": "process", "socket_buffer_size": "1KiB"}, "= 1024: use 4KiB to 256MiB, or null"),
        ({"backend": "process", "socket_buffer_size": "512MiB"}, "use 4KiB to 256MiB, or null"),
        ({"socket_buffer_size": "1MiB"}, r"talks inproc \(no sockets\); set parallel.communication=tcp"),
        ({"communication": "inproc", "socket_buffer_size": "1MiB"}, "set parallel.communication=tcp"),
        ({"backend": "process", "communication": "ucx", "socket_buffer_size": "1MiB"}, "not ucx"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "socket_buffer_size": "1MiB"},
         "--preload .*openclaw_dask.cluster.sockets_preload"),
        ({"backend": "process", "security.temporary_certificates": True, "socket_buffer_size": "1MiB"}, "not TLS"),
    ],
)
def test_combinations_where_buffers_cannot_apply_are_refused(overrides, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        cfg(**overrides)
    assert "parallel.socket_buffer_size" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {"backend": "process", "socket_buffer_size": "4KiB"},
        {"backend": "process", "communication": "gloo", "socket_buffer_size": "256MiB"},
        {"backend": "thread", "communication": "tcp", "socket_buffer_size": "1MiB"},
    ],
)
def test_tcp_clusters_accept_the_key(overrides):
    assert cfg(**overrides).parallel.socket_buffer_size == dask.utils.parse_bytes(overrides["socket_buffer_size"])
