"""The commands that start everything (``gradacc serve``, ``worker``, ``demo``, ``migrate``...):
the top layer, and the only code that may import both ``api`` and ``worker``."""
