"""The profiler on planted problems: recall and false verdicts, per script and backend, in one run.

Every script in ``examples/planted/`` plants one problem the way users write it (``from_array``,
``map_blocks``, fused reductions, ``map_overlap``, delayed functions, computes in a loop) or is a
balanced control that plants nothing. Each runs ``--runs`` times on each backend under
``openclaw profile``; a row says how often each planted kind was found and which other verdicts
came (see :mod:`openclaw_dask.diagnostics.calibrate` for what counts as false).

    python benchmarks/profile_calibration.py [--runs 3] [--backends thread,process]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from openclaw_dask.cluster import load_for_backend as load_config
from openclaw_dask.diagnostics.calibrate import expected_kinds, judge
from openclaw_dask.diagnostics.profile import profile_config

PLANTED = Path(__file__).resolve().parent.parent / "examples" / "planted"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="thread,process")
    args = ap.parse_args()
    planted = found = runs = false = 0
    print("| script | backend | planted | found (of runs) | false verdicts |")
    print("|---|---|---|---|---|")
    for script in sorted(PLANTED.glob("*.py")):
        for backend in args.backends.split(","):
            expected = expected_kinds(script, backend)
            config = load_config(None, {"parallel.backend": backend, "parallel.workers": 2})
            hits: Counter[str] = Counter()
            extra: Counter[str] = Counter()
            for _ in range(args.runs):
                result = profile_config(config, script)
                if result.exit_code:
                    raise SystemExit(f"{script.name} failed on {backend}")
                judged = judge(expected, result.report.verdicts)
                hits.update(judged.found)
                extra.update(judged.false)
            planted += len(expected) * args.runs
            found += sum(hits.values())
            runs += args.runs
            false += sum(extra.values())
            found_text = ", ".join(f"{k} {hits[k]}/{args.runs}" for k in sorted(expected)) or "-"
            extra_text = ", ".join(f"{k} x{n}" for k, n in sorted(extra.items())) or "none"
            print(f"| {script.name} | {backend} | {', '.join(sorted(expected)) or 'nothing'} | {found_text} | {extra_text} |", flush=True)
    print(f"\nrecall {found}/{planted} ({found / max(1, planted):.0%}); false verdicts {false} in {runs} runs")


if __name__ == "__main__":
    main()
