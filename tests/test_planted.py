"""The problems ``openclaw profile --help`` tells a user to plant get their verdicts (issue 24, item 14).

The help's own straggler example once said "no problems found" on 2 cores: four 256 MiB chunks
on two threads hid a 2 s straggler behind three normal chunks. The examples are read from the
help itself and run as written.
"""

from __future__ import annotations

import json
import shlex

import pytest

from .test_cli import invoke

EXPECTED = {"workload.skew": "data-skew", "workload.straggler": "stragglers", "parallel.task_chunk_size=64KiB": "overhead-bound"}


def _examples() -> list[str]:
    """The help's example commands, each joined from its continued lines (``\\`` at a line's end)."""
    text = invoke("profile", "--help").stdout.replace("\\\n", " ")
    return [" ".join(line.split()) for line in text.splitlines() if line.strip().startswith("openclaw profile ")]


def test_the_help_shows_one_example_per_planted_problem():
    assert len(_examples()) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)))
def test_each_example_of_the_help_gets_its_verdict(index):
    line = _examples()[index]
    (kind,) = [k for marker, k in EXPECTED.items() if marker in line]
    r = invoke(*shlex.split(line)[1:], "--json")  # after "openclaw"
    assert r.exit_code == 0, r.output
    kinds = [v["kind"] for v in json.loads(r.stdout)["profile"]["verdicts"]]
    assert kind in kinds, (line, kinds)
