"""Prefect tasks: thin wrappers that call into `bpe`."""
