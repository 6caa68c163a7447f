"""Tables that fit the terminal: never a cut number or a cut word.

Rich cuts a cell (``2.8…``, ``peak m…``) when a table is wider than the console (80 columns
when piped, or ``COLUMNS``). :func:`print_table` instead chooses column widths itself: a cell
that must stay on one line (a number with its unit, ``1.95 GiB``) keeps its whole width, a
label wraps between words, a header wraps between words; and when even that does not fit, each
row is printed as a block of ``name: value`` pairs, as many to a line as the width allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Col", "fit_widths", "print_table"]

_INDENT = "  "
_GAP = "   "


@dataclass(frozen=True)
class Col:
    """A column: its header, whether its cells may wrap between words, and how they align.

    Parameters
    ----------
    name : str
        The header, plain text (it wraps between words when the column is narrow).
    wrap : bool
        ``False`` (numbers with their units): a cell is never broken, so the column is as wide
        as its widest cell. ``True`` (labels, sentences): a cell wraps between words.
    justify : str
        ``"right"`` or ``"left"``.
    """

    name: str
    wrap: bool = False
    justify: str = "right"


def _text(cell: Any) -> Any:
    from rich.text import Text

    return cell if isinstance(cell, Text) else Text.from_markup(str(cell))


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def fit_widths(cols: Sequence[Col], rows: Sequence[Sequence[Any]], budget: int) -> list[int] | None:
    """Column widths whose sum is at most ``budget``, breaking no number and no word; None if none do.

    Each column starts as wide as its widest cell and header; labels, then headers, give up
    width (the widest first) until the sum fits, never below their longest word.
    """
    plain = [[_text(r[i]).plain for r in rows] for i in range(len(cols))]
    natural = [max([len(c.name)] + [max((len(line) for line in p.splitlines()), default=0) for p in plain[i]])
               for i, c in enumerate(cols)]
    least = [max([_longest_word(c.name)] + [(_longest_word(p) if c.wrap else max((len(x) for x in p.splitlines()), default=0))
                                            for p in plain[i]])
             for i, c in enumerate(cols)]
    if sum(least) > budget:
        return None
    widths = list(natural)
    for shrinkable in ([i for i, c in enumerate(cols) if c.wrap], list(range(len(cols)))):
        while sum(widths) > budget:
            slack = [i for i in shrinkable if widths[i] > least[i]]
            if not slack:
                break
            widest = max(slack, key=lambda i: widths[i])
            widths[widest] -= 1
    return widths


def _table(title: str | None, cols: Sequence[Col], widths: Sequence[int]) -> Any:
    from rich.box import SIMPLE_HEAD
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, box=SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for c, w in zip(cols, widths):
        # a cell that must not break is no wider than ``w``, so wrapping (between words) breaks only labels
        table.add_column(Text(c.name), justify=c.justify, width=w, overflow="fold")  # type: ignore[arg-type]
    return table


def _overhead(console: Any, cols: Sequence[Col]) -> int:
    """What the table's padding and rules add to the sum of its column widths."""
    from rich.measure import Measurement

    probe = _table(None, cols, [1] * len(cols))
    return Measurement.get(console, console.options.update_width(10**6), probe).maximum - len(cols)


def print_table(console: Any, title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Any]], *, key: int = 1) -> None:
    """Print ``rows`` as a table if it fits ``console.width``, else one block per row.

    Parameters
    ----------
    console : rich.console.Console
        Where to print; its ``width`` is the budget.
    title : str or None
        Printed above the table (or the blocks).
    cols : sequence of Col
        The columns.
    rows : sequence of sequences
        The cells: rich markup strings or :class:`rich.text.Text`.
    key : int
        How many leading columns name a row: a block's heading is their cells, joined by `` / ``.
    """
    widths = fit_widths(cols, rows, console.width - _overhead(console, cols)) if rows else [len(c.name) for c in cols]
    if widths is not None:
        table = _table(title, cols, widths)
        for r in rows:
            table.add_row(*(_text(c) for c in r))
        console.print(table)
        return
    _print_blocks(console, title, cols, rows, key)


def _print_blocks(console: Any, title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Any]], key: int) -> None:
    from rich.text import Text

    if title:
        console.print(Text(title, style="italic"))
    for r in rows:
        heading = Text(" / ").join(_text(c) for c in r[:key])
        heading.stylize("bold")
        console.print(heading, overflow="fold")
        line = Text(_INDENT)
        for c, cell in zip(cols[key:], r[key:]):
            if not _text(cell).plain.strip():
                continue
            pair = Text.assemble((f"{c.name}: ", "dim"), _text(cell))
            if line.plain.strip() and len(line) + len(_GAP) + len(pair) > console.width:
                console.print(line, overflow="fold")
                line = Text(_INDENT)
            line = Text.assemble(line, _GAP if line.plain.strip() else "", pair)
        console.print(line, overflow="fold")
