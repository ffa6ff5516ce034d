"""Serving, the kernel's part: which model a request names and which predict server answers it
(``resolve``), and the predictions table that carries ``/v1/jobs/{id}/predict`` to a worker
(``predictions``). Upstream routes are ``gradacc.upstreams`` (a setting reads them)."""
