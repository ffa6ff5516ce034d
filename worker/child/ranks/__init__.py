"""The processes torchrun starts for a multi-process job: the launcher (in the training child),
torchrun's agent, and each rank's main."""
