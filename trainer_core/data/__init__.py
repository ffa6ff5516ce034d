"""The job's data: loaded (built-in, local file or hub), held out, tokenized once into
memory-mapped Arrow files, cached by content, and planned into micro-batches and windows.

- ``load``: ``load_job_data`` -> ``JobData`` (train and eval ``TokenizedSplit``s).
- ``tokenized``: the Arrow files and their views. ``cache``, ``cache_key``: the data cache.
- ``plan``: the epoch plan (``EpochIndex``), written once. ``loader``: the DataLoader over it.
- ``rollouts``: a window's fixed GRPO-family rollouts as rows the plan cuts (``RolloutPlan``).

No imports here: ``cache`` is stdlib only and stays cheap to import (``gradacc cache``).
"""
