"""TLS for real: temporary and file certificates, a TLS ``dask scheduler``, refusals. Loopback only."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import openclaw_dask
from openclaw_dask.cluster import get_backend
from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.cluster.security import security_for
from openclaw_dask.errors import BackendUnavailable, ClusterStartError, ConfigError
from tests.conftest import dask_deployment

pytest.importorskip("cryptography")


def plan(config):
    return get_backend(config.parallel.backend).plan(config)


def cfg(**overrides):
    return load_config(None, overrides, env={})


def _make_certificates(folder: Path, authority: str) -> dict[str, str]:
    """A CA and one certificate it signed (for 127.0.0.1), as PEM files: ca.pem, cert.pem, key.pem."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def sign(subject, issuer, public_key, signer, is_ca):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
        if not is_ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, authority)])
    ca = sign(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    cert = sign(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node")]), ca_name, key.public_key(), ca_key, False)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return {k: str(folder / f"{k.removesuffix('_file')}.pem") for k in ("ca_file", "cert_file", "key_file")}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return _make_certificates(tmp_path_factory.mktemp("certs"), "openclaw-test-ca")


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory):
    return _make_certificates(tmp_path_factory.mktemp("other"), "someone-else")


@pytest.fixture
def tls_scheduler(tmp_path, certs):
    """A real ``dask scheduler`` speaking only TLS on 127.0.0.1, and a function that adds TLS workers."""
    tls = ["--tls-ca-file", certs["ca_file"], "--tls-cert", certs["cert_file"], "--tls-key", certs["key_file"]]
    with dask_deployment(tmp_path, ["--protocol", "tls", *tls], ["--memory-limit", "1GiB", *tls]) as deployment:
        yield deployment


def _port(address: str) -> str:
    return address.rpartition(":")[2]


# -- clusters openclaw starts ---------------------------------------------------------------


def test_process_cluster_with_temporary_certificates_computes_over_tls():
    with openclaw_dask.session(backend="process", workers=2, memory_limit="1GiB", temporary_certificates=True) as s:
        assert s.client.scheduler.address.startswith("tls://127.0.0.1:")
        assert len(s.workers()) == 2 and all(a.startswith("tls://127.0.0.1:") for a in s.workers())
        x = s.array((100_000,), fill="arange")  # chunks on both workers: the sum moves data between them
        assert s.compute(x.sum()) == 99_999 * 100_000 / 2
        assert s.client.security.require_encryption is False  # as configured, not Security.temporary()'s True


def test_thread_backend_with_certificates_uses_tls_over_loopback():
    with openclaw_dask.session(workers=2, temporary_certificates=True) as s:
        assert s.client.scheduler.address.startswith("tls://127.0.0.1:")
        assert s.client.submit(os.getpid).result() == os.getpid()
        assert s.slots == 2


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_tls_cluster_listens_only_on_loopback(backend):
    import psutil

    with openclaw_dask.session(backend=backend, workers=1, dashboard=True, temporary_certificates=True) as s:
        assert s.compute(s.array(10, fill="ones").sum()) == 10
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        listening = [c.laddr for p in procs for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        ports = {_port(s.client.scheduler.address), *(_port(a) for a in s.workers())}
    assert ports <= {str(a.port) for a in listening}, (ports, listening)
    assert all(a.ip == "127.0.0.1" for a in listening), listening


def test_a_plain_tcp_client_in_another_process_is_refused_by_a_tls_cluster():
    with openclaw_dask.session(workers=1, temporary_certificates=True, require_encryption=True) as s:
        plain = f"tcp://127.0.0.1:{_port(s.client.scheduler.address)}"
        code = "import sys; from distributed import Client; Client(sys.argv[1], timeout=5)"
        env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}  # a plain client: no TLS settings
        r = subprocess.run([sys.executable, "-c", code, plain], check=False, capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode != 0 and "CommClosedError" in r.stderr, r.stderr[-2000:]
        clients = s.client.run_on_scheduler(lambda dask_scheduler: set(dask_scheduler.clients))
        assert clients == {"fire-and-forget", s.client.id}  # the plain client never got in
        assert s.compute(s.array(10, fill="ones").sum()) == 10  # and the cluster is unharmed


@pytest.mark.parametrize("require", [True, False])
def test_require_encryption_refuses_every_plain_connection_from_the_session(dask_scheduler, require):
    from distributed import Client

    from openclaw_dask.cluster.client import new_client

    plain_address, _ = dask_scheduler
    with openclaw_dask.session(workers=1, temporary_certificates=True, require_encryption=require) as s:
        assert s.client.security.require_encryption is require
        if require:
            loops = _io_loops()
            with pytest.raises(RuntimeError, match="encryption required"):
                new_client(plain_address, timeout=5)
            # distributed leaves a refused client's IO loop to the garbage collector, which once
            # collected it as the next test's client started: that client stalled 10 s and failed
            assert _io_loops() == loops
        else:
            with Client(plain_address, timeout=5) as c:
                assert c.scheduler.address == plain_address


def _io_loops() -> int:
    return sum(t.name == "IO loop" and t.is_alive() for t in threading.enumerate())


# -- an existing TLS deployment (backend remote) --------------------------------------------


def test_remote_backend_with_certificate_files_relative_to_the_config_file(tls_scheduler, certs, tmp_path):
    from distributed import Client

    address, add_worker = tls_scheduler
    add_worker()
    conf = tmp_path / "conf"
    (conf / "tls").mkdir(parents=True)
    for f in certs.values():
        shutil.copy(f, conf / "tls")
    (conf / "openclaw_config.yaml").write_text(
        "parallel: {backend: remote, workers: 1, timeout: 30s}\n"
        f"cluster: {{scheduler_address: '{address}'}}\n"
        "security: {ca_file: tls/ca.pem, cert_file: tls/cert.pem, key_file: tls/key.pem, require_encryption: true}\n"
    )
    assert not Path("tls").exists()  # the paths resolve against the file's folder, not the current one
    with openclaw_dask.session(conf / "openclaw_config.yaml") as s:
        assert s.client.scheduler.address == address
        x = s.array((10_000,), fill="arange")
        assert s.compute(x.sum()) == 9_999 * 10_000 / 2
        # the session's dask config carries the certificates: a client the user makes speaks TLS too
        with Client(address, timeout=10) as c:
            assert len(c.scheduler_info()["workers"]) == 1


def test_plain_tcp_address_of_a_tls_scheduler_is_refused_clearly(tls_scheduler):
    address, _ = tls_scheduler
    plain = f"tcp://127.0.0.1:{_port(address)}"
    t0 = time.monotonic()
    with pytest.raises(ClusterStartError, match=rf"^the dask-scheduler at {plain} closed the connection during the handshake "
                       rf"\(.+\); if it runs with TLS, write the address as tls://127\.0\.0\.1:{_port(address)} and set security"):
        openclaw_dask.session(backend="remote", scheduler_address=plain, timeout="20s")
    assert time.monotonic() - t0 < 10  # refused at once, not after the timeout


def test_certificates_of_another_authority_are_refused_clearly(tls_scheduler, other_certs):
    address, _ = tls_scheduler
    with pytest.raises(ClusterStartError, match=rf"^TLS handshake with the dask-scheduler at {address} failed "
                       r"\(certificate verify failed: .+\); the scheduler must run with TLS, security.ca_file"):
        openclaw_dask.session(backend="remote", scheduler_address=address, timeout="10s", **other_certs)


def _tls_against_plain(address: str, certs: dict[str, str]) -> None:
    address = address.replace("tcp://", "tls://")
    with pytest.raises(ClusterStartError, match=rf"^TLS handshake with the dask-scheduler at {address} failed \(.+\); "
                       "the scheduler must run with TLS"):
        openclaw_dask.session(backend="remote", scheduler_address=address, timeout="10s", **certs)


# distributed fails in two ways here, depending on who speaks first (both seen): an SSL error, or
# tornado's "IOStream is not idle; cannot convert to SSL" ValueError.
def test_tls_client_against_a_plain_scheduler_process_is_refused_clearly(dask_scheduler, certs):
    _tls_against_plain(dask_scheduler[0], certs)


def test_tls_client_against_a_plain_in_process_scheduler_is_refused_clearly(certs):
    with openclaw_dask.session(workers=1, communication="tcp") as plain:
        _tls_against_plain(plain.client.scheduler.address, certs)
        assert plain.compute(plain.array(10, fill="ones").sum()) == 10


# -- what is planned, and configurations that cannot run ------------------------------------


def test_certificates_turn_auto_into_tls_with_one_security_for_cluster_and_client(certs):
    for backend in ("thread", "process"):
        config = cfg(backend=backend, **certs)
        kw = plan(config)
        assert kw["protocol"] == "tls"
        assert kw["security"] == {**certs, "require_encryption": False}  # the plan names the files; start makes the object
        sec = security_for(config)
        assert sec.tls_ca_file == certs["ca_file"] and sec.require_encryption is False
        assert sec.tls_scheduler_cert == sec.tls_worker_cert == sec.tls_client_cert == certs["cert_file"]
        assert sec.tls_scheduler_key == sec.tls_worker_key == sec.tls_client_key == certs["key_file"]
    assert "security" not in plan(cfg(backend="process"))


def test_tls_allows_a_non_loopback_bind_but_keeps_http_on_loopback(certs):
    # plan() only: nothing binds. TLS covers the comms, not the HTTP servers.
    kw = plan(cfg(backend="process", host="0.0.0.0", dashboard=True, **certs))
    assert kw["host"] == "0.0.0.0" and kw["protocol"] == "tls"
    assert kw["dashboard_address"] == kw["scheduler_kwargs"]["dashboard_address"] == "127.0.0.1:0"
    assert kw["worker_dashboard_address"] == "127.0.0.1:0"
    with pytest.raises(ConfigError, match="dashboard on a non-loopback address"):
        cfg(dashboard="0.0.0.0:8787", **certs)
    insecure = plan(cfg(backend="process", host="0.0.0.0", allow_insecure_bind=True))
    assert insecure["scheduler_kwargs"]["dashboard_address"] == "0.0.0.0:0" and "worker_dashboard_address" not in insecure


def test_missing_certificate_file_names_the_key_and_the_path(certs, tmp_path):
    files = {**certs, "ca_file": "nope/ca.pem"}
    with pytest.raises(ConfigError, match=re.escape(f"security.ca_file = nope/ca.pem: no such file ({tmp_path}/nope/ca.pem)")):
        plan(cfg(backend="process", **files))
    with pytest.raises(ConfigError, match="security.ca_file = nope/ca.pem: no such file"):
        openclaw_dask.session(backend="process", **files)


def test_unusable_certificate_files_are_one_clear_error(certs, other_certs, tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"security.ca_file = .*junk.pem: not a PEM certificate authority"):
        security_for(cfg(**{**certs, "ca_file": str(junk)}))
    with pytest.raises(ConfigError, match=r"security.cert_file = .*cert.pem: cannot load it with its key"):
        security_for(cfg(**{**certs, "key_file": other_certs["key_file"]}))


def test_an_unreadable_key_file_is_named_as_the_key_file(certs, tmp_path, monkeypatch):
    """Issue 22: an unreadable security.key_file was reported as a problem of security.cert_file."""
    import errno

    key = tmp_path / "key.pem"
    shutil.copy(certs["key_file"], key)
    key.chmod(0)
    if os.access(key, os.R_OK):  # root reads it anyway: give it the EACCES another user would get
        real_open = Path.open

        def denied(self, *args, **kwargs):
            if self == key:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(ConfigError, match=re.escape(f"security.key_file = {key}: cannot read {key} (Permission denied)")) as e:
        security_for(cfg(**{**certs, "key_file": str(key)}))
    assert "cert_file" not in str(e.value) and "\n" not in str(e.value)


def test_temporary_certificates_without_cryptography_name_the_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography", None)  # as if not installed: import fails
    with pytest.raises(BackendUnavailable, match=r"needs the cryptography package.*pip install 'openclaw-dask\[tls\]'"):
        security_for(cfg(temporary_certificates=True))


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"communication": "tls"}, "parallel.communication = tls: TLS needs certificates; set security.temporary_certificates=true or security.cert_file"),
        ({"require_encryption": True}, "security.require_encryption = true: needs certificates"),
        ({"cert_file": "c.pem", "key_file": "k.pem"}, "security.cert_file = c.pem: TLS in dask is mutual: set security.ca_file"),
        ({"ca_file": "ca.pem"}, "security.ca_file = ca.pem: TLS in dask is mutual: this process needs its own certificate"),
        ({"key_file": "k.pem"}, "security.key_file = k.pem: TLS in dask is mutual"),
        ({"temporary_certificates": True, "ca_file": "ca.pem"}, "set either it or the files, not both"),
        ({"temporary_certificates": True, "communication": "tcp"}, "parallel.communication = tcp: tcp is not encrypted but security.temporary_certificates is set"),
        ({"temporary_certificates": True, "communication": "inproc"}, "inproc is not encrypted"),
        ({"backend": "mpi", "temporary_certificates": True}, "TLS is built for backends thread, process, remote, cuda, ssh and slurm, not mpi"),
        ({"backend": "remote", "scheduler_address": "tls://127.0.0.1:1"}, "a TLS scheduler needs certificates; set security.ca_file"),
        ({"backend": "remote", "scheduler_address": "tls://127.0.0.1:1", "temporary_certificates": True},
         "a remote scheduler cannot trust certificates made by this process"),
        ({"backend": "remote", "scheduler_address": "tcp://127.0.0.1:1", "ca_file": "a", "cert_file": "b"},
         "not TLS, but certificates are set; write it as tls://127.0.0.1:1"),
    ],
)
def test_tls_combinations_that_cannot_run(overrides, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        cfg(**overrides)


def test_non_loopback_refusals_name_the_security_section():
    with pytest.raises(ConfigError, match=r"without TLS .*set up TLS in the security section \(security.ca_file and cert_file\)"):
        cfg(host="0.0.0.0")
    assert cfg(host="0.0.0.0", temporary_certificates=True).cluster.host == "0.0.0.0"
