"""The worker, arranged by the process each part runs in.

- ``worker.consumer``: the Celery worker process. Takes one job at a time off the queue, claims
  it, starts its training process and supervises it; reconciles lost jobs. Owns every Celery hook.
- ``worker.fork_server``: the process each Celery worker keeps beside it, which imported torch and
  the core once and forks a training process per job (``multiprocessing``'s fork server).
- ``worker.predict``: the predict server each worker starts, with the models it keeps loaded (an
  LRU, adapters sharing their base): OpenAI's chat and text completions over HTTP
  (``worker.predict.openai``) and /predict requests from the predictions table, through one
  engine and one batcher.
- ``worker.child``: the training process of one job: runs the core, reports to the database, polls
  for a stop (``outcome`` records how it ended). Never imports Celery.
- ``worker.child.ranks``: what torchrun starts for a multi-process job: the launcher (in the
  training process), torchrun's agent, and each rank's main.
- ``worker.exit_codes``: the exit statuses the child returns and the consumer reads.
"""
