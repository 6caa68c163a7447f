"""Bokeh layouts shown in a Jupyter kernel, with BokehJS loaded once per kernel, not once per plot.

:func:`~openclaw_dask.diagnostics.html.notebook_html` makes each display a self-contained page
(BokehJS inline in an ``iframe``, about 1.6 MB a plot). In a kernel, :func:`notebook_bundle` sends
the BokehJS bundles a layout needs the first time only (inline: no network needed), then the
layout's document alone; elsewhere (no kernel) it declines, and the self-contained page is shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Container
from typing import Any

from openclaw_dask.cluster.network import in_jupyter

__all__ = ["notebook_bundle"]

_LOADED: set[str] = set()  # digests of the BokehJS bundles this kernel has sent to its page


def notebook_bundle(make_layout: Callable[[], Any], include: Container[str] | None = None,
                    exclude: Container[str] | None = None) -> dict[str, str] | None:
    """The layout ``make_layout()`` returns as a ``text/html`` display for a Jupyter kernel; ``None`` outside one.

    What an object's ``_repr_mimebundle_`` returns (IPython then shows its ``_repr_html_`` where
    this is ``None``). The HTML carries the BokehJS bundles the layout needs that this kernel has not sent yet,
    then the layout's document, which waits for BokehJS (a later plot needs none of it).
    """
    if not in_jupyter() or (include is not None and "text/html" not in include) \
            or (exclude is not None and "text/html" in exclude):
        return None
    from bokeh.embed.bundle import bundle_for_objs_and_resources
    from bokeh.embed.notebook import notebook_content
    from bokeh.resources import INLINE

    layout = make_layout()
    scripts = []
    for js in bundle_for_objs_and_resources([layout], INLINE).js_raw:
        digest = hashlib.sha256(js.encode()).hexdigest()
        if digest not in _LOADED:
            _LOADED.add(digest)
            scripts.append(js)
    script, div, _ = notebook_content(layout)
    loads = "".join(f'<script type="text/javascript">{js}</script>' for js in scripts)
    return {"text/html": f'{loads}{div}<script type="text/javascript">{script}</script>'}

