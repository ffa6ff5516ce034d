"""A worker's predict server: a process of its own (torch, the models) that answers
POST /v1/jobs/{id}/predict through the predictions table (``gradacc.predictions``)."""
