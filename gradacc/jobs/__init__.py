"""A job's life: the state machine (the only writer of ``jobs.status``), its records (events,
epoch and step rows) and restarts."""
