"""Render a local HTML file in headless Chromium (Debian's package) and return the PNG path."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def screenshot(page: Path, out: Path, size: str = "1100,1000") -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("headless Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}", "--virtual-time-budget=5000",
             f"--screenshot={out}", page.resolve().as_uri()],
            capture_output=True, timeout=120, check=True,
        )
    return out


def plotted_colors(png: Path) -> set[tuple[int, int, int]]:
    """Distinct non-grey colours: Bokeh glyphs are coloured, an unrendered page is not."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    return {c for _, c in image.getcolors(maxcolors=1 << 20) if max(c) - min(c) > 60}
