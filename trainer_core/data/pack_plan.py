"""With ``packing``, which of a window's rows share a micro-batch: rows regrouped within their
window only, so the window, its N_W and its update stay the plan's (``data.plan``).

The window's rows go first-fit, longest first, into bins as wide as the window's longest row
(``data.packing.place``); the bins are dealt to the window's micro-batches fullest first, in
runs of equal count, so bins of like fill share a micro-batch. The window keeps its number of
micro-batches (the backends close a window after that many), and a micro-batch that would get no
bin (a window of many short rows) takes the shortest row of the one with most rows. Each micro-batch is then
packed into rows of that width (``data.packing.pack``): about as many tokens as computed slots,
and no packed row wider than the longest row, so attention costs no more than padded rows do.
"""

from __future__ import annotations

import numpy as np

from trainer_core.data.packing import place


def _deal(bins: list[list[int]], lengths: list[int], count: int) -> list[list[int]]:
    """Bins (of positions) to ``count`` micro-batches, fullest first and in runs, so bins of
    like fill share a micro-batch (its packed rows are as wide as its fullest); none empty."""
    ranked = sorted(bins, key=lambda b: -sum(lengths[r] for r in b))
    per, extra = divmod(len(ranked), count)
    parts: list[list[int]] = []
    start = 0
    for i in range(count):
        end = start + per + (i < extra)
        parts.append([row for rows in ranked[start:end] for row in rows])
        start = end
    for part in parts:
        if not part:  # fewer bins than micro-batches: borrow a row from the most crowded
            donor = max(parts, key=len)
            shortest = min(donor, key=lambda r: lengths[r])
            donor.remove(shortest)
            part.append(shortest)
    return parts


def packed_windows(
    order: np.ndarray, lengths: np.ndarray, batch_size: int, accumulation: int
) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's order with each window's rows regrouped, and where each micro-batch starts
    in it (one more entry: the end)."""
    window_rows = batch_size * accumulation
    new_order: list[int] = []
    starts = [0]
    for first in range(0, len(order), window_rows):
        window = order[first : first + window_rows].tolist()
        sizes = [int(lengths[row]) for row in window]
        count = -(-len(window) // batch_size)  # the plan's micro-batches in this window
        for part in _deal(place(sizes, "bins"), sizes, count):
            new_order += [window[i] for i in part]
            starts.append(len(new_order))
    return np.asarray(new_order, dtype=order.dtype), np.asarray(starts, dtype=np.int64)
