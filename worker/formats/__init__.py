"""The Kafka ecosystem's formats: Schema Registry framing with Avro, JSON Schema and Protobuf.

The worker's own wire format is JSON (schemas/). With ``OLU_INPUT_FORMAT`` avro, json-schema or
protobuf it reads values framed by a Schema Registry (magic byte 0, a 4-byte schema id, the
payload) and turns each into the documented JSON event first (input.py, mapping.py, protobuf.py),
so the rest of the worker does not know the difference; with ``OLU_RELEASE_FORMAT`` avro or
json-schema it publishes releases framed the same way (release.py). Decoding and encoding use
confluent-kafka's serializers and its ``SchemaRegistryClient`` (registry.py), which caches every
schema it has fetched. events.py has the event's schemas for producers.

No Kafka client calls here: worker/stream/input/framed.py and registry_releases.py wire this into the loop.
"""
