"""/v1/batches: lines checked and answered (``lines``), batches held and ended (``store``)."""
