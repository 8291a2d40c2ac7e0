"""Schema Registry input in the loop: transcode each fetched batch, pause a partition while the
registry cannot be asked, and resume it with backoff (worker/formats does the decoding).

With ``OLU_INPUT_FORMAT`` = avro, json-schema or protobuf, the loop hands each partition's batch to
:meth:`RegistryInput.prepare` before the partition runner sees it. The compiled readers take the
common insert straight into the batch's columns (framed_scan.py); every other record becomes its
JSON event (worker/formats/input.py) and goes through the runner unchanged, so every check and
dead-letter reason is that of JSON input (under ``OLU_REFERENCE_KERNEL=1`` every record does).
:func:`decode_message` (the runner's one call into this module) turns a record's decoding verdict
into its dead letter, and :func:`original` gives the dead-letter topic the record's original bytes.

Registry down (connection refused, timeout, HTTP 5xx, credentials refused): the batch is cut
before the first record whose schema the client has not cached, the partition is paused and
seeked back to that record, and retried after 0.5 s, 1 s, 2 s, ... at most
:data:`MAX_BACKOFF_S` apart (one warning when it pauses, one line when it resumes). Records are
never dead-lettered for it, nothing is skipped: the replay after resume starts at that record.
Other partitions whose schemas are cached go on.
"""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition

from ...formats.input import InputDecoder, Transcoded, transcode
from ...formats.plans import PlanCache
from ...formats.registry import new_client
from ...logs import get_logger
from ..exceptions import DeadLetter
from .decode import Delete, Insert, decode_event
from .framed_scan import prepare_framed
from .scan import compiled_decoder

__all__ = ["RegistryInput", "decode_message", "original"]

log = get_logger("olu.registry")

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0


def decode_message(msg, *, dim: int, max_bytes: int, features=None, sparse: bool = False,
                   labels: bool = False) -> Insert | Delete:
    """:func:`decode_event` of a fetched message; a transcoded
    record's verdict is its dead letter."""
    if type(msg) is Transcoded and msg.dead is not None:
        raise DeadLetter(msg.dead.reason, msg.dead.detail)
    return decode_event(msg.key(), msg.value(), dim=dim, max_bytes=max_bytes, features=features,
                        sparse=sparse,
                        labels=labels)


def original(msg):
    """The message as fetched (a dead letter carries its original key and value bytes)."""
    return msg.original if type(msg) is Transcoded else msg


class RegistryInput:
    """Transcoding and registry pauses for the loop (one per worker)."""

    def __init__(self, decoder: InputDecoder, dim: int, clock=time.monotonic, features=None):
        self.decoder, self.dim, self.features = decoder, dim, features
        self.plans = PlanCache(decoder, dim, on_no_plan=self._no_plan)
        self.clock = clock
        self.paused: dict[tuple[str, int], tuple[float, int]] = {}  # key -> (retry at, offset)
        # key -> the next pause's length (an outage goes on)
        self.backoff: dict[tuple[str, int], float] = {}
        self.pauses = 0

    def _no_plan(self, schema_id: int, why: str) -> None:
        log.info("records of this schema take the generic decoder (slower)",
                 extra={"schema_id": schema_id, "format": self.decoder.format, "why": why})

    @classmethod
    def from_settings(cls, settings) -> RegistryInput | None:
        if settings.input_format == "json":
            return None
        spec = settings.feature_spec
        decoder = InputDecoder(settings.input_format, new_client(settings),
                               fields=settings.input_fields or (),
                               feature_fields=settings.input_feature_fields or (),
                               max_bytes=settings.max_record_bytes,
                               named=() if spec is None else tuple(f.name for f in spec.fields))
        return cls(decoder, settings.dim, features=spec)

    def prepare(self, consumer, key: tuple[str, int], batch: list) -> list:
        """The part of ``batch`` to process now, transcoded; pauses the partition where it stops."""
        if key in self.paused:  # fetched before the pause took effect: fetched again on resume
            return []
        if compiled_decoder():  # the common insert straight into columns (framed_scan.py)
            decoded, stop, error = prepare_framed(self.plans, batch, dim=self.dim,
                                                  max_bytes=self.decoder.max_bytes,
                                                  features=self.features)
        else:
            decoded, stop, error = transcode(self.decoder, batch)
        if stop is None:
            self.backoff.pop(key, None)
            return decoded
        backoff = self.backoff.get(key)
        offset = batch[stop].offset()
        if backoff is None:
            log.warning("schema registry unavailable; partition paused, retrying with backoff",
                        extra={"topic": key[0], "partition": key[1], "offset": offset,
                               "error": str(error)})
        backoff = backoff or FIRST_BACKOFF_S
        self.backoff[key] = min(2 * backoff, MAX_BACKOFF_S)
        tp = TopicPartition(key[0], key[1], offset)
        consumer.pause([tp])
        consumer.seek(tp)  # what was fetched past it is fetched again on resume
        self.paused[key] = (self.clock() + backoff, offset)
        self.pauses += 1
        return decoded

    def resume_due(self, consumer, assigned) -> None:
        """Resume the paused partitions whose retry time has come (those still ``assigned``)."""
        now = self.clock()
        for key, (retry_at, offset) in list(self.paused.items()):
            if key not in assigned:
                del self.paused[key]
                self.backoff.pop(key, None)
            elif now >= retry_at:
                del self.paused[key]
                consumer.resume([TopicPartition(key[0], key[1])])
                log.info("partition resumed to retry the schema registry",
                         extra={"topic": key[0], "partition": key[1], "offset": offset})
