"""The Celery worker process: the run-job task, the training process's supervision, and the
reconciler. ``worker.consumer.tasks`` owns the Celery app and every Celery signal hookup."""
