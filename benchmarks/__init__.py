"""Benchmarks of vanilla_transformer, each run as `python -m benchmarks.NAME` from the repository root."""
