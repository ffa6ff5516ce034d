"""``gradacc cache show|clear``: the tokenized-data cache under ``GRADACC_HOME/cache/data``."""

from __future__ import annotations

import datetime as dt

from gradacc.settings import Settings
from trainer_core.data.cache import DataCache


def _size(n_bytes: int) -> str:
    value = float(n_bytes)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def cache_command(settings: Settings, *, action: str) -> int:
    cache = DataCache(settings.data_cache_dir, settings.data_cache_max_bytes)
    if action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entries from {cache.root}")
        return 0
    entries = cache.entries()
    total = sum(e.size_bytes for e in entries)
    print(f"{cache.root}: {len(entries)} entries, {_size(total)} of {_size(cache.max_bytes)}")
    for e in entries:  # most recently used first: the last line is evicted first
        used = dt.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds")
        d = e.description
        print(
            f"  {e.key}  {_size(e.size_bytes):>9}  used {used}  {d.get('dataset')}  "
            f"{d.get('model')}  {d.get('task')}  max_seq_length={d.get('max_seq_length')}"
        )
    return 0
