"""The configuration reference (``docs/configuration.md``), generated from the keys' declarations.

Each key's default, range and help text are declared once, with its field in
:mod:`openclaw_dask.config.model`; this renders them as Markdown, one table per section.
``openclaw config reference`` prints it, ``python scripts/gen-docs.py`` writes it, and a test
checks that ``docs/configuration.md`` is what it prints.
"""

from __future__ import annotations

from openclaw_dask.config.schema import KEYS, TYPED_SECTIONS
from openclaw_dask.config.template import SECTION_NOTES, yaml_text

__all__ = ["config_reference"]

HEADER = """# Configuration reference

Every key of `openclaw_config.yaml`, its default and what it does, generated from the key's one
declaration (its field in `openclaw_dask/config/model.py`, which also makes the file `openclaw init`
writes) by `python scripts/gen-docs.py`; `tests/test_docs.py` checks that this page is
current. Precedence: `--set` > `OPENCLAW_<KEY>` environment variables > the file > these defaults.
`openclaw config show` prints the effective value of every key and where it came from.

Every number has a range (declared with its key in `openclaw_dask/config/model.py`); a value
outside it is refused in one line naming the key. A config file is read only if it is a regular
file of at most 1 MiB whose YAML holds at most 10,000 values once aliases are expanded, nested at
most 32 levels, with no key twice in one mapping (`openclaw_dask/config/reading.py`).
"""


def config_reference() -> str:
    """The Markdown reference of every key: its default, range and help text, one table per section (pure)."""
    out = [HEADER]
    for section in TYPED_SECTIONS:
        note = f"{_cell(SECTION_NOTES[section])}\n\n" if section in SECTION_NOTES else ""
        out.append(f"\n## `{section}`\n\n{note}| key | default | range | what it does |\n|---|---|---|---|")
        out += [f"| `{k.dotted}` | `{yaml_text(k.default)}` | {k.range} | {_cell(k.doc)} |" for k in KEYS if k.section == section]
    out.append(f"\n## `dask`\n\n{_cell(SECTION_NOTES['dask'])}")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.splitlines()).replace("|", "\\|")
