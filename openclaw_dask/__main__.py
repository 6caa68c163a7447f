"""``python -m openclaw_dask`` is the ``openclaw`` command."""

from openclaw_dask.cli import main

if __name__ == "__main__":
    main()
