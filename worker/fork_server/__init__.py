"""Each Celery worker's fork server: a process that imported torch, transformers and the core once
(``preload``), from which every job's training process is forked in ~10-30 ms (``child``)."""
