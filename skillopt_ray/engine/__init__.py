"""The engine: one run inside Ray: the driver actor, the trainer, the env actors' pool, the standby actors."""
