"""Kafka stream layer: decode input events, route poison records
to the dead-letter topic, publish releases."""
