"""Reliability suite: crashes, rebalances, broker and object-store outages, hostile input, against real services."""
