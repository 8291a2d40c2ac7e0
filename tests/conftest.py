"""Shared pytest wiring: the real services are session fixtures in tests/fixtures/."""

pytest_plugins = [
    "tests.fixtures.kafka",  # kafka_bootstrap: env, testcontainers, or the local KRaft broker
    "tests.fixtures.s3",  # s3_server / s3_store: SeaweedFS on loopback
    "tests.fixtures.registry",  # schema_registry_url: Apicurio Registry (Confluent API) on loopback
]
