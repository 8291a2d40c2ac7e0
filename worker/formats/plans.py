"""One compiled-reader plan per writer schema id, fetched and built once (the plans of the formats).

:class:`PlanCache` asks the registry for a framed record's writer schema (the client caches it)
and builds the plan of its format: avro_plan.py, protobuf_plan.py, jsonschema_plan.py. A schema
without a plan (outside what the compiled readers walk, or carrying data-contract rules, which
only the generic deserializer executes, or Avro named-type references) is remembered as None:
its records all take the generic path, which decides as it always did. Why a schema has no plan
goes to ``on_no_plan`` once per id (the stream layer logs it), so an operator can see why a topic
runs slower than the benches.
"""

from __future__ import annotations

from .avro_plan import avro_plan
from .exceptions import UndecodableRecord
from .jsonschema_plan import jsonschema_plan
from .protobuf_plan import protobuf_plan
from .readers import has_rules

__all__ = ["AvroPlan", "PlanCache", "ProtobufPlan"]


class AvroPlan:
    """avro_plan.py's table; ``named``: the features are named fields."""

    __slots__ = ("table", "named")

    def __init__(self, table, named: bool):
        self.table, self.named = table, named


class ProtobufPlan:
    """protobuf_plan.py's table, defaults and what an absent op reads as."""

    __slots__ = ("table", "defaults", "op_default")

    def __init__(self, table, defaults, op_default: int):
        self.table, self.defaults, self.op_default = table, defaults, op_default


class PlanCache:
    """Plans by schema id for ``decoder`` (an :class:`~.input.InputDecoder`) at dimension ``dim``;
    ``on_no_plan(schema_id, why)`` is told once per schema without one."""

    def __init__(self, decoder, dim: int, on_no_plan=None):
        self.decoder, self.dim = decoder, dim
        self.on_no_plan = on_no_plan
        self._plans: dict[int, object | None] = {}

    def plan(self, schema_id: int):
        """The plan of ``schema_id``, or None; raises RegistryUnavailable when the registry could
        not be asked (nothing is remembered then: the next batch asks again)."""
        if schema_id in self._plans:
            return self._plans[schema_id]
        try:
            schema = self.decoder.writer_schema(schema_id)
        except UndecodableRecord:
            return None  # no such schema: each record says so on the generic path (not remembered)
        plan, why = self._build(schema, schema_id)
        if plan is None and self.on_no_plan is not None:
            self.on_no_plan(schema_id, why)
        self._plans[schema_id] = plan
        return plan

    def _build(self, schema, schema_id: int):
        fmt, mapping = self.decoder.format, self.decoder.mapping
        if mapping.named:
            return None, ("a feature spec (its named fields are read by the JSON reader after "
                          "transcoding)")
        expected = self.decoder.reader.schema_type
        if (schema.schema_type or "AVRO") != expected:
            return None, f"the schema is {schema.schema_type}, not {expected}"
        if has_rules(schema):
            return None, "the schema has data-contract rules"
        if fmt == "avro":
            if schema.references:
                return None, "the schema references other schemas"
            table, why = avro_plan(schema.schema_str, mapping, dim=self.dim)
            return (AvroPlan(table, bool(mapping.features)) if table is not None else None), why
        if fmt == "protobuf":
            try:
                descriptor = self.decoder.protobuf_class(schema_id, (0,)).DESCRIPTOR
            except UndecodableRecord as bad:
                return None, bad.detail
            table, defaults, op_default, why = protobuf_plan(descriptor, mapping, dim=self.dim)
            return (ProtobufPlan(table, defaults, op_default) if table is not None else None), why
        if not mapping.identity:
            return None, "a field mapping (the compiled JSON reader reads the documented names)"
        return jsonschema_plan(schema.schema_str, dim=self.dim)
