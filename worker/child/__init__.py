"""The training process of one job: ``entry.main`` runs the core with a callback that writes to the
database (``reporting``) and a poller that asks whether to stop (``stop``). No Celery here."""
