"""Test-only helpers the core carries: failpoints that make rare moments happen on demand
(``failpoints``), a counter of DDP's gradient all-reduces (``comm_counter``), and a callback
that keeps a run's step and epoch records (``recorder``)."""
