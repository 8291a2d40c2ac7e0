"""The Kafka ecosystem's formats: Schema Registry framing with Avro, JSON Schema and Protobuf.

The worker's own wire format is JSON (schemas/). With ``OLU_INPUT_FORMAT`` avro, json-schema or
protobuf it reads values framed by a Schema Registry (magic byte 0, a 4-byte schema id, the
payload). Each writer schema becomes a plan once (plans.py: avro_plan.py, protobuf_plan.py,
jsonschema_plan.py), which the compiled readers (framed_kernel.py, run by
worker/stream/input/framed_scan.py) follow to take the common records straight into the batch's
columns; the rest take the generic path (input.py, readers.py, mapping.py, protobuf.py), which turns
each into the documented JSON event, so every verdict is the JSON one. With ``OLU_RELEASE_FORMAT``
avro or json-schema releases are published framed the same way (release.py) with confluent-kafka's
serializers. ``SchemaRegistryClient`` (registry.py) caches every schema it has fetched. events.py
has the event's schemas for producers.

No Kafka client calls here: worker/stream/input/framed.py and
registry_releases.py wire this into the loop.
"""
