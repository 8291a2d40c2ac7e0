"""olu-worker: a Kafka stream worker that learns and unlearns online with certified guarantees."""

__version__ = "0.1.0"
