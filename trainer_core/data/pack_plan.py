"""With ``packing``, which of a window's rows share a micro-batch: rows regrouped within their
window only, so the window, its N_W and its update stay the plan's (``data.plan``).

The window's rows go first-fit, longest first, into bins as wide as the window's longest row
(``data.packing.place``); the bins are dealt to the window's micro-batches fullest first, in
runs of equal count, so bins of like fill share a micro-batch. The window keeps its number of
micro-batches (the backends close a window after that many), and a micro-batch that would get no
bin (a window of many short rows) takes the shortest row of the one with most rows. With W ranks
the bins are dealt whole to each micro-batch's W rank shares, and the ranks take turns at the
fuller share: cutting a micro-batch's rows in W equal counts instead gave rank 0 the long rows'
bins in every micro-batch, so the other ranks waited for it at every window's all-reduce.

Each micro-batch (each rank's share of it) is then packed into rows of that width
(``data.packing.pack``): about as many tokens as computed slots, and no packed row wider than
the longest row, so attention costs no more than padded rows do.
"""

from __future__ import annotations

import numpy as np

from trainer_core.data.packing import place


def _deal(bins: list[list[int]], lengths: list[int], count: int, shares: int) -> list[list[int]]:
    """Bins (of positions) to the ``shares`` rank shares of ``count`` micro-batches, fullest
    first and in runs of equal count, so bins of like fill share a packed micro-batch (its rows
    are as wide as its fullest) and the spare bins go to as few micro-batches as can hold them.
    Micro-batch m takes the next ``shares`` runs, to its ranks in reverse order when m is odd,
    so no rank gets the fuller run every time; none empty while rows remain to lend."""
    ranked = sorted(bins, key=lambda b: -sum(lengths[r] for r in b))
    per, extra = divmod(len(ranked), count * shares)
    runs: list[list[int]] = []
    start = 0
    for i in range(count * shares):
        end = start + per + (i < extra)
        runs.append([row for rows in ranked[start:end] for row in rows])
        start = end
    parts: list[list[int]] = []
    for m in range(count):
        mine = runs[m * shares : (m + 1) * shares]
        parts += mine[::-1] if m % 2 else mine
    for part in (p for p in parts if not p):  # fewer bins than parts: borrow from the most
        donor = max(parts, key=len)  # crowded, unless the window has fewer rows than parts
        if len(donor) > 1:
            shortest = min(donor, key=lambda r: lengths[r])
            donor.remove(shortest)
            part.append(shortest)
    return parts


def packed_windows(
    order: np.ndarray, lengths: np.ndarray, batch_size: int, accumulation: int, shares: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """The epoch's order with each window's rows regrouped, and where each micro-batch's share
    of each of the ``shares`` ranks starts in it (one more entry: the end). A share is empty
    only when its window has fewer rows than shares."""
    window_rows = batch_size * accumulation
    new_order: list[int] = []
    starts = [0]
    for first in range(0, len(order), window_rows):
        window = order[first : first + window_rows].tolist()
        sizes = [int(lengths[row]) for row in window]
        count = -(-len(window) // batch_size)  # the plan's micro-batches in this window
        for part in _deal(place(sizes, "bins"), sizes, count, shares):
            new_order += [window[i] for i in part]
            starts.append(len(new_order))
    return np.asarray(new_order, dtype=order.dtype), np.asarray(starts, dtype=np.int64)
