"""The commented defaults file (what ``openclaw init`` writes), rendered from the keys' declarations.

Every key appears with its default and its help text above it, section by section, in the
order :mod:`openclaw_dask.config.model` declares them; only the file's own header and the notes
on whole sections are written here.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from openclaw_dask.config.schema import KEYS, TYPED_SECTIONS

__all__ = ["HEADER", "SECTION_NOTES", "default_config_text"]

HEADER = """\
# openclaw_config.yaml — one file that shapes the Dask cluster and how work is chunked.
# Every key below is shown with its default. Precedence: --set > OPENCLAW_<KEY> env > this file > defaults.
# Sizes take 64MiB / 2GB / a number of bytes; durations take 30s / 10m / a number of seconds.
# Reference: docs/configuration.md (or: openclaw config reference). Check a file with: openclaw config validate FILE
"""

# Written above a section's heading (the `dask` section has no keys of openclaw's: its note is its documentation).
SECTION_NOTES = {
    "security": """\
TLS between client, scheduler and workers (backends thread, process, remote): certificates turn
communication auto into tls. Dask's TLS is mutual: set temporary_certificates, or ca_file + cert_file.
Relative paths start at this file's folder.""",
    "dask": "passed unchanged to dask.config, e.g.  distributed: {scheduler: {worker-saturation: .inf}}",
}


def yaml_text(value: Any) -> str:
    """A default as it is written in the file: ``true``, ``null``, ``[]``, ``30s``."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 16).removesuffix("\n").removesuffix("\n...")


def _comment(text: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}" for line in text.splitlines()]


@functools.cache
def default_config_text() -> str:
    """The packaged defaults file: every key with its default and a comment."""
    lines = [HEADER]
    for section in TYPED_SECTIONS:
        lines += [*_comment(SECTION_NOTES.get(section, "")), f"{section}:"]
        for key in (k for k in KEYS if k.section == section):
            lines += [*_comment(key.doc, "  "), f"  {key.name}: {yaml_text(key.default)}"]
        lines.append("")
    lines += [*_comment(SECTION_NOTES["dask"]), "dask: {}"]
    return "\n".join(lines) + "\n"
