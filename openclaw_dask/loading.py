"""``openclaw_dask.load_config``: a configuration read, then checked against what is installed.

The config layer checks keys, values and the combinations that hold everywhere; which
names exist for ``parallel.backend`` and ``workload.io_format`` is for the registries above
it to say (a package may add a backend or a reader). Nothing needs to be installed to check.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from openclaw_dask.cluster import load_for_backend
from openclaw_dask.io.formats import check_format

if TYPE_CHECKING:
    from openclaw_dask.config import Config

__all__ = ["load_checked"]


def load_checked(path: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None,
                 **kwargs: Any) -> Config:
    """Load a configuration and check it against the backend and the reader it names (``openclaw_dask.load_config``).

    Arguments are those of :func:`openclaw_dask.config.load_config`.

    Raises
    ------
    ConfigError
        For an unknown key, a bad value, a combination the named backend cannot run, or a
        ``workload.io_format`` no installed reader has (the message lists those that are).
    """
    config = load_for_backend(path, overrides, **kwargs)
    check_format(config)
    return config
