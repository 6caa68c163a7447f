"""TLS for the clusters openclaw starts and the schedulers it reaches (the ``security:`` section).

distributed's TLS is mutual: every side shows a certificate and checks the other's against
one certificate authority, so a file-based setup needs ``ca_file`` and ``cert_file`` (and
``key_file`` unless the key is inside ``cert_file``). ``temporary_certificates`` makes one
self-signed pair in memory instead, shared by the client, scheduler and workers of a local
cluster. Relative paths start at the folder of the config file that names them.
"""

from __future__ import annotations

import importlib.util
import ssl
from typing import TYPE_CHECKING, Any

from openclaw_dask.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from distributed.security import Security

    from openclaw_dask.config import Config

__all__ = ["certificate_files", "security_for", "tls_plan", "tls_settings"]

_ROLES = ("client", "scheduler", "worker")
_NO_CRYPTOGRAPHY = ("security.temporary_certificates = true needs the cryptography package, which is not installed; "
                    "run: pip install 'openclaw-dask[tls]'")


def _path(config: Config, dotted: str) -> str | None:
    """The absolute path a file key names; a missing file is a :class:`ConfigError`."""
    path = config.resolve_path(dotted)
    if path is None:
        return None
    if not path.is_file():
        raise ConfigError.at(config, dotted, f"no such file ({path})", hint="give the path of a PEM file")
    try:  # each file on its own: ssl would blame an unreadable key file on the certificate
        with path.open("rb"):
            pass
    except OSError as e:
        raise ConfigError.at(config, dotted, f"cannot read {path} ({e.strerror or e})",
                             hint="make it readable by the user openclaw runs as") from None
    return str(path)


def certificate_files(config: Config) -> tuple[str, str, str | None] | None:
    """``(ca_file, cert_file, key_file)`` as absolute paths, checked to load; ``None`` without files.

    Raises
    ------
    ConfigError
        A file is missing, is not PEM, or the key does not belong to the certificate.
    """
    if config.security.cert_file is None:
        return None
    ca, cert, key = (_path(config, f"security.{k}") for k in ("ca_file", "cert_file", "key_file"))
    assert ca is not None and cert is not None  # checks.py refuses one without the other
    # Load them now, so a bad file is one clear line here rather than a failed handshake later.
    try:
        ctx = ssl.create_default_context(cafile=ca)
    except OSError as e:  # ssl.SSLError for a bad file, PermissionError for an unreadable one
        raise ConfigError.at(config, "security.ca_file", f"not a PEM certificate authority ({_reason(e)})") from None
    try:
        ctx.load_cert_chain(cert, key)
    except OSError as e:
        raise ConfigError.at(config, "security.cert_file", f"cannot load it with its key ({_reason(e)})",
                             hint="give a PEM certificate and, in security.key_file or inside it, its unencrypted private key") from None
    return ca, cert, key


def _reason(error: OSError) -> str:
    return getattr(error, "reason", None) or error.strerror or str(error)


def tls_plan(config: Config) -> dict[str, Any] | None:
    """The TLS a cluster of ``config`` will use, as plain data (files checked, nothing made); ``None`` when off.

    ``{"ca_file", "cert_file", "key_file", "require_encryption"}`` for certificate files, or
    ``{"temporary_certificates": True, "require_encryption"}``: :func:`security_for` makes the
    :class:`~distributed.security.Security` of it when the cluster starts.

    Raises
    ------
    BackendUnavailable
        ``temporary_certificates`` without the ``cryptography`` package.
    ConfigError
        A certificate file is missing or unusable.
    """
    s = config.security
    if not s.enabled:
        return None
    if s.temporary_certificates:
        if importlib.util.find_spec("cryptography") is None:
            raise BackendUnavailable(_NO_CRYPTOGRAPHY)
        return {"temporary_certificates": True, "require_encryption": s.require_encryption}
    files = certificate_files(config)
    assert files is not None
    return {"ca_file": files[0], "cert_file": files[1], "key_file": files[2], "require_encryption": s.require_encryption}


def security_for(config: Config) -> Security | None:
    """The :class:`distributed.security.Security` of :func:`tls_plan` (which raises what it raises), or ``None``.

    One object for every role (client, scheduler, workers); ``require_encryption`` as configured.
    """
    plan = tls_plan(config)
    if plan is None:
        return None
    from distributed.security import Security

    if plan.get("temporary_certificates"):
        security = Security.temporary()
        security.require_encryption = plan["require_encryption"]  # temporary() always says True
        return security
    per_role = {f"tls_{role}_{part}": plan[f"{part}_file"] for role in _ROLES for part in ("cert", "key")}
    return Security(tls_ca_file=plan["ca_file"], require_encryption=plan["require_encryption"], **per_role)


def tls_settings(config: Config) -> dict[str, Any]:
    """``dask.config`` keys that give every ``Security()`` made while a session runs the same TLS.

    So a client the user makes, or a scheduler or worker openclaw runs from the same config,
    speaks TLS too. Temporary certificates exist only in memory: they travel in the
    :class:`~distributed.security.Security` object, not here.
    """
    s = config.security
    if not s.enabled:
        return {}
    settings: dict[str, Any] = {"distributed.comm.require-encryption": s.require_encryption}
    files = certificate_files(config)
    if files is not None:
        ca, cert, key = files
        settings["distributed.comm.tls.ca-file"] = ca
        for role in _ROLES:
            settings[f"distributed.comm.tls.{role}.cert"] = cert
            settings[f"distributed.comm.tls.{role}.key"] = key
    return settings
