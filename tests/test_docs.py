"""The user guide works as written: docs/getting-started.md's commands, run in an empty folder."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "getting-started.md"


def _blocks(text: str) -> list[list[str]]:
    return [[line for line in block.splitlines() if line.strip()] for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_getting_started_commands_run_as_written(tmp_path):
    install, *steps = _blocks(GUIDE.read_text())
    assert any("pip install -e ." in line for line in install)  # .ci/run does that part itself
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("OPENCLAW_CONFIG", None)
    outputs, previous = {}, ""  # the last step's output: what led to a failing one
    for line in (line for block in steps for line in block):
        r = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, f"{previous}$ {line}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        outputs[line], previous = r.stdout, f"$ {line}\n{r.stdout[-1500:]}"
    assert (tmp_path / "openclaw_config.yaml").is_file() and (tmp_path / "profile.html").stat().st_size > 100_000
    planted = "openclaw profile --size 256MiB --set parallel.task_chunk_size=64KiB --html profile.html"
    assert "overhead-bound" in outputs[planted]
    assert "overhead-bound" not in outputs["openclaw profile --size 256MiB --config fixed.yaml"]
    assert (tmp_path / "tuned.yaml").read_text().startswith("# tuned by `openclaw tune array-sum`")


@pytest.mark.parametrize(("page", "generate"), [("configuration.md", "config_reference"), ("cli.md", "cli_reference")])
def test_generated_reference_pages_are_current(page, generate):
    from openclaw_dask.cli.reference import cli_reference
    from openclaw_dask.config.reference import config_reference

    text = {"config_reference": config_reference, "cli_reference": cli_reference}[generate]()
    assert (ROOT / "docs" / page).read_text() == text, f"docs/{page} is stale: run python scripts/gen-docs.py"


def test_configuration_reference_lists_every_key_with_its_default():
    from openclaw_dask.config import KEYS, default_config_text
    from openclaw_dask.config.reference import config_reference

    text = config_reference()
    defaults = yaml.safe_load(default_config_text())
    for key in KEYS:
        value = defaults[key.section][key.name]
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else "{}" if value == {} else str(value)
        assert f"| `{key.dotted}` | `{shown}` |" in text, key.dotted


def test_cli_reference_has_every_command_and_the_help_it_prints():
    from openclaw_dask.cli import main
    from openclaw_dask.cli.reference import cli_reference

    text = cli_reference()
    for name in main.list_commands(None):
        assert f"## `openclaw {name}`" in text
    assert "## `openclaw k8s manifest`" in text and "## `openclaw config reference`" in text
    r = subprocess.run([str(Path(sys.executable).parent / "openclaw"), "doctor", "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "100"}, check=False)
    assert r.stdout.strip() in text  # the page shows what the command prints


# -- jupyter lab, as Getting Started says -----------------------------------------------------


@pytest.mark.slow
def test_jupyter_lab_serves_its_page_on_loopback(tmp_path):
    pytest.importorskip("jupyterlab", reason="jupyterlab is not installed (pip install -e '.[notebook]')")
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or shutil.which("jupyter")
    if jupyter is None:
        pytest.skip("the jupyter command is not on PATH")
    token = secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data")}
    argv = [jupyter, "lab", "--no-browser", "--ip", "127.0.0.1", "--port", "0", f"--ServerApp.root_dir={tmp_path}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI runs as root; jupyter refuses that unasked
        argv.append("--allow-root")
    log = tmp_path / "lab.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline, url = time.monotonic() + 90, None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/lab", log.read_text())
            url = found and f"http://127.0.0.1:{found.group(1)}/lab?token={token}"
            time.sleep(0.2)
        assert url, f"jupyter lab printed no URL (exit {proc.poll()}):\n{log.read_text()[-2000:]}"
        with urllib.request.urlopen(url, timeout=30) as r:
            assert r.status == 200 and "<title>JupyterLab" in r.read().decode()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
