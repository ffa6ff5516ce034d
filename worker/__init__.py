"""Celery workers: one job at a time per worker, each job trained in its own child process."""
