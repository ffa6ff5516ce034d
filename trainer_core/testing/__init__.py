"""Test-only helpers the core carries: failpoints that make rare moments happen on demand
(``failpoints``), and a counter of DDP's gradient all-reduces (``comm_counter``)."""
