"""Rewrite the generated reference pages: docs/configuration.md and docs/cli.md.

    python scripts/gen-docs.py
"""

from pathlib import Path

from openclaw_dask.cli.reference import cli_reference
from openclaw_dask.config.reference import config_reference

DOCS = Path(__file__).resolve().parent.parent / "docs"

if __name__ == "__main__":
    for name, text in (("configuration.md", config_reference()), ("cli.md", cli_reference())):
        (DOCS / name).write_text(text)
        print(f"wrote docs/{name}")
