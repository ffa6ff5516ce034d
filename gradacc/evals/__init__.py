"""OpenAI's Evals (``/v1/evals``) over this server's graders and models: an eval's item schema and
testing criteria (``criteria``, ``config``), a run's data source and its items (``sources``), one
item sampled and graded (``grade``), and a run's counts (``results``)."""
