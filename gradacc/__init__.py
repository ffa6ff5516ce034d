"""Code the API and the worker share: settings, the database engine and the ORM models.

Nothing here imports torch, FastAPI or Celery: both sides import it with no arrow turning back.
"""
