"""Which queued job runs where: the claim, its order, the broker's messages and their count, the
queue position, capacity, preemption and gang admission (docs/scheduling.md, a module per section)."""
