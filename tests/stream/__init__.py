"""Tests of the stream layer (worker.stream)."""
