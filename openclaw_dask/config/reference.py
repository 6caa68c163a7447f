"""The configuration reference (``docs/configuration.md``), generated from the packaged defaults.

The defaults file is the one place each key's default and meaning are written; this renders it
as Markdown, one table per section. ``openclaw config reference`` prints it, and a test checks that
``docs/configuration.md`` is what it prints.
"""

from __future__ import annotations

import re

from openclaw_dask.config.loader import default_config_text
from openclaw_dask.config.schema import key_by_name

__all__ = ["config_reference"]

_SECTION = re.compile(r"^([a-z_]+):\s*(?:\{\})?\s*$")  # dask: {} is a section too
_KEY = re.compile(r"^  ([a-z_]+):\s*(.*?)\s*$")

HEADER = """# Configuration reference

Every key of `openclaw_config.yaml`, its default and what it does, generated from the packaged
defaults (`openclaw_dask/config/defaults.yaml`, what `openclaw init` writes) by
`openclaw config reference > docs/configuration.md`; `tests/test_docs.py` checks that this page is
current. Precedence: `--set` > `OPENCLAW_<KEY>` environment variables > the file > these defaults.
`openclaw config show` prints the effective value of every key and where it came from.

Every number has a range (declared with its key in `openclaw_dask/config/schema.py`); a value
outside it is refused in one line naming the key. A config file is read only if it is a regular
file of at most 1 MiB whose YAML holds at most 10,000 values once aliases are expanded, nested at
most 32 levels, with no key twice in one mapping (`openclaw_dask/config/reading.py`).
"""


def config_reference() -> str:
    """The Markdown reference of every key in the packaged defaults, with its comment (pure)."""
    out, comment, section = [HEADER], [], ""
    for line in default_config_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped.lstrip("# ").strip())
            continue
        heading, key = _SECTION.match(line), _KEY.match(line)
        if heading:
            section = heading.group(1)
            table = "| key | default | range | what it does |\n|---|---|---|---|"
            out.append(f"\n## `{section}`\n\n" + (" ".join(comment) if section == "dask" else table))
        elif key:
            text = " ".join(comment).replace("|", "\\|")
            known = key_by_name(f"{section}.{key.group(1)}")
            span = known.range if known is not None else ""
            out.append(f"| `{section}.{key.group(1)}` | `{key.group(2)}` | {span} | {text} |")
        if heading or key or not stripped:
            comment = []
    return "\n".join(out) + "\n"
