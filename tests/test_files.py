"""openclaw_dask.files: the one way openclaw writes a file (issue 22, "a lost file").

Never over an existing file without ``force``, never through a symbolic link, whole or not at all.
The CLI matrix (each writing command) is in tests/test_cli.py.
"""

from __future__ import annotations

import os
import stat

import pytest

from openclaw_dask.errors import ConfigError
from openclaw_dask.files import check_folder, check_target, replacing, write_file


def _left(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_new_file_is_written_whole_with_the_umasks_permissions(tmp_path):
    mask = os.umask(0o027)
    try:
        path = write_file(tmp_path / "a.yaml", "x: 1\n")
    finally:
        os.umask(mask)
    assert path.read_text() == "x: 1\n" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert write_file(tmp_path / "b.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    assert _left(tmp_path) == ["a.yaml", "b.bin"]


def test_an_existing_file_needs_force_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("mine\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=r"a.yaml already exists; pass --force .*to overwrite it"):
        write_file(path, "new\n")
    assert path.read_text() == "mine\n"
    write_file(path, "new\n", force=True)
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _left(tmp_path) == ["a.yaml"]


@pytest.mark.parametrize("kind", ["file", "dangling", "folder"])
def test_a_symlink_is_never_written_through_even_with_force(kind, tmp_path):
    victim = tmp_path / "victim"
    if kind == "file":
        victim.write_text("precious\n")
    elif kind == "folder":
        victim.mkdir()
    link = tmp_path / "out.yaml"
    link.symlink_to(victim)
    for force in (False, True):
        with pytest.raises(ConfigError, match=r"out.yaml: it is a symbolic link .*even with --force"):
            write_file(link, "evil\n", force=force)
    assert link.is_symlink()
    if kind == "dangling":
        assert not victim.exists()
    if kind == "file":
        assert victim.read_text() == "precious\n"
    if kind == "folder":
        assert list(victim.iterdir()) == []
    assert _left(tmp_path) == (["out.yaml", "victim"] if kind != "dangling" else ["out.yaml"])


def test_what_is_not_a_regular_file_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")
    for name in ("d", "fifo"):
        with pytest.raises(ConfigError, match=f"cannot write .*{name}: it exists and is not a regular file"):
            write_file(tmp_path / name, "x", force=True)
    with pytest.raises(ConfigError, match="folder .*missing does not exist; create it first"):
        check_target(tmp_path / "missing" / "a.yaml")


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_draft(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("mine\n")
    with pytest.raises(RuntimeError, match="crash"), replacing(path, force=True) as (f, draft):
        f.write("half of it")
        assert draft.parent == tmp_path and draft.name.startswith(".a.yaml.")
        raise RuntimeError("crash")
    assert path.read_text() == "mine\n" and _left(tmp_path) == ["a.yaml"]
    with pytest.raises(RuntimeError), replacing(tmp_path / "new.yaml") as (f, _):
        f.write("half")
        raise RuntimeError("crash")
    assert _left(tmp_path) == ["a.yaml"]


def test_what_appears_at_the_path_during_the_write_is_not_clobbered(tmp_path):
    path = tmp_path / "a.yaml"
    with pytest.raises(ConfigError, match="a.yaml already exists"), replacing(path) as (f, _):
        f.write("mine")
        path.write_text("someone else's\n")  # a file made meanwhile, without force: theirs stays
    assert path.read_text() == "someone else's\n" and _left(tmp_path) == ["a.yaml"]
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    path.unlink()
    with pytest.raises(ConfigError, match="symbolic link"), replacing(path, force=True) as (f, _):
        f.write("evil")
        path.symlink_to(victim)  # a link planted meanwhile, even with force: refused
    assert victim.read_text() == "precious\n" and path.is_symlink() and _left(tmp_path) == ["a.yaml", "victim"]


def test_an_output_folder_is_checked_whole_before_anything_is_written(tmp_path):
    from openclaw_dask.diagnostics.benchmark import write_reports

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("mine\n")
    with pytest.raises(ConfigError, match="report.md already exists"):
        write_reports({}, out)  # refused before report.json or the page are even made
    assert _left(out) == ["report.md"]
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(ConfigError, match="cannot write into .*link: it is a symbolic link"):
        check_folder(tmp_path / "link", ["report.json"], force=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="it exists and is not a folder"):
        check_folder(tmp_path / "file", ["report.json"])


def test_write_fixed_and_write_default_config_refuse_links_and_existing_files(tmp_path):
    from openclaw_dask.config import write_default_config
    from openclaw_dask.diagnostics.fixes import FixedConfig, write_fixed

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "fixed.yaml").symlink_to(victim)
    with pytest.raises(ConfigError, match="symbolic link"):
        write_fixed(FixedConfig("parallel: {workers: 2}\n", None), tmp_path / "fixed.yaml", force=True)
    (tmp_path / "link-to-folder").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="symbolic link"):
        write_default_config(tmp_path / "link-to-folder", force=True)
    assert victim.read_text() == "precious\n" and _left(tmp_path) == ["fixed.yaml", "link-to-folder", "victim.txt"]
    write_fixed(FixedConfig("parallel: {workers: 2}\n", None), tmp_path / "ok.yaml")
    with pytest.raises(ConfigError, match="ok.yaml already exists"):
        write_fixed(FixedConfig("parallel: {workers: 3}\n", None), tmp_path / "ok.yaml")
    assert (tmp_path / "ok.yaml").read_text() == "parallel: {workers: 2}\n"
