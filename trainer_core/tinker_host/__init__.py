"""A Tinker client's model, held in one process between its calls: ``model`` loads it (a LoRA of a
rank, or the whole model at rank 0), ``host.TrainingHost`` accumulates ``forward_backward`` calls
into one window and applies it at ``optim_step``, ``sampling`` samples it. The core knows nothing
of the wire: the worker decodes requests into ``Datum`` and encodes the answers."""
