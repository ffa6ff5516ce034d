"""The shared kernel: settings, the database engine, the ORM tables, the job state machine
(``jobs``), scheduling, the rules a spec must pass on this server (``sources``), serving (which
model a request names and where it is answered: ``serving``, ``upstreams``), the server's part of
a grading (``grading``: the sandbox's limits, the upstream chat callable), executors, and the
OpenAI names (``openai``).

``api`` and ``worker`` both import it; it imports neither of them (``lint-imports`` checks), and
nothing here imports torch or FastAPI. The commands that start everything live in ``commands``.
"""
