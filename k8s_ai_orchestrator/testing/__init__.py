"""Test doubles and real local clusters for testing pipelines offline."""
