"""Checkpoints: the folder's format (``format``), the background writer that keeps the last N
(``writer``), when to save (``policy``), and the one owner of resume (``resume``: ``RunState``,
``read_run_state``, ``restore``)."""
