"""Check the profiler on scripts with a planted problem (``examples/planted/``): what it found, missed and invented.

Each script says what it plants in its first line, ``# expect: data-skew`` (or several kinds, comma
separated, or ``nothing`` for a balanced control); ``KIND on BACKEND`` plants it on that backend only
(a graph's embedded data costs nothing to send when the workers share the client's process). A verdict that is not expected is false, except a
``load-imbalance`` whose fix sends the user to an expected cause first: that is the cause's effect on
the lanes, said as such. ``benchmarks/profile_calibration.py`` runs every script several times on each
local backend and prints recall and false verdicts (recorded in ``docs/profile.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Judged", "expected_kinds", "judge"]

_EXPECT = re.compile(r"^#\s*expect:\s*(.+)$")


def expected_kinds(script: str | Path, backend: str) -> frozenset[str]:
    """The verdict kinds a planted script's ``# expect:`` line names for ``backend`` (empty for ``nothing``)."""
    first = Path(script).read_text().splitlines()[0]
    match = _EXPECT.match(first)
    if match is None:
        raise ValueError(f"{script} does not start with '# expect: KIND[ on BACKEND][, ...]' or '# expect: nothing'")
    kinds = set()
    for item in match.group(1).split(","):
        kind, _, only = (part.strip() for part in item.partition(" on "))
        if kind != "nothing" and only in ("", backend):
            kinds.add(kind)
    return frozenset(kinds)


@dataclass(frozen=True)
class Judged:
    """One profiled run of a planted script, judged against what it plants."""

    expected: frozenset[str]
    found: frozenset[str]
    false: tuple[str, ...]  # verdicts not planted (their kinds)

    @property
    def missed(self) -> frozenset[str]:
        return self.expected - self.found


def judge(expected: frozenset[str], verdicts: list[Any]) -> Judged:
    """Compare ``verdicts`` with the ``expected`` kinds."""
    found = frozenset(v.kind for v in verdicts)

    def planted(v: Any) -> bool:
        return v.kind in expected or (v.kind == "load-imbalance" and any(f"fix the {k} first" in v.fix for k in expected))

    return Judged(expected, found & expected, tuple(v.kind for v in verdicts if not planted(v)))
