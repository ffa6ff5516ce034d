"""The run: its context (``build``, ``context``), the epoch loop written once (``run``), its
meters, stop requests, evaluation, checkpoints (``saving``), metrics file and the "auto"
micro-batch probe (``autobatch``)."""
