"""Backends: where a step runs. See `base.Backend` for the protocol."""
