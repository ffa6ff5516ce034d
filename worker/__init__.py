"""The worker, arranged by the process each part runs in.

- ``worker.consumer``: the Celery worker process. Takes one job at a time off the queue, claims
  it, starts its training process and supervises it; reconciles lost jobs. Owns every Celery hook.
- ``worker.fork_server``: the process each Celery worker keeps beside it, which imported torch and
  the core once and forks a training process per job (``multiprocessing``'s fork server).
- ``worker.child``: the training process of one job: runs the core, reports to the database, polls
  for a stop. Never imports Celery.
- ``worker.exit_codes``: the exit statuses the child returns and the consumer reads.
"""
