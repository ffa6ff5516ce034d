"""The shared kernel: settings, the database engine, the ORM models, the job state machine, the
queue's name and options, and the rules a spec must pass on this server.

``api`` and ``worker`` both import it; it imports neither of them (``lint-imports`` checks), and
nothing here imports torch or FastAPI. The commands that start everything live in ``commands``.
"""
