"""The job's data: loaded (built-in, local file or hub), held out, tokenized once into
memory-mapped Arrow files, cached by content, and planned into micro-batches and windows.

- ``load``: ``load_job_data`` -> ``JobData``; ``splits``: its ``TokenizedSplit`` and
  ``PreferenceSplit``; ``sources``: built-in, file, folder or hub, to a ``DatasetDict``.
- ``encoding``: rows to tokens, by format: ``chat`` (conversations, ``turns`` their trained
  spans, ``chat_tools`` their function calls), ``dpo`` (pairs), plain text and classification
  (``tokenized``, which also holds the Arrow files and their views).
- ``cache``, ``cache_key``: the data cache.
- ``plan``: the epoch plan (``EpochIndex``) and each window's counts, written once.
- ``loader``: ``EpochPlan``, a micro-batch of the plan for this rank (its share and the counts'
  ÷W, written once), and the DataLoader over it. ``dpo`` (pairs) and ``grpo`` (a window's
  rollouts) plan their own rows on it; ``packing`` and ``pack_plan``: rows laid end to end.

No imports here: ``cache`` is stdlib only and stays cheap to import (``gradacc cache``).
"""
