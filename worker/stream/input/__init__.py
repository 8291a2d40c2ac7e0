"""The input stage: a fetched batch in, one decoded form out
(batch.py), whatever the format and the decoder."""
