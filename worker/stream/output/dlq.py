"""Dead letters out: the original record whole, cut to a marked prefix only when it cannot go whole.

A dead letter carries the original record's key and value bytes, and the worker's producer is sized
for anything its consumer can receive (``Settings.producer_config``). The dead-letter topic may
still refuse a large one: the worker does not create that topic, and Kafka's default limit is
1 MiB (``message.max.bytes`` = 1,048,588) while input topics may allow more. A refusal inside a
transaction aborts the whole transaction, and the replay would meet the same record again: a poison
pill. So before producing a dead letter larger than a truncated one would be, :class:`TopicLimit`
checks it against the topic's limit, read with DescribeConfigs (cached for a minute; a broker or
ACL that does not answer leaves Kafka's default), and :class:`DeadLetters` cuts it up front if it
would not fit. A refusal seen anyway (the limit was lowered meanwhile) lowers the known limit and,
outside a transaction, sends the cut copy at once. A cut dead letter keeps the first
``PREFIX_BYTES`` of key and value and carries ``olu.truncated`` (deadletter.truncated); the whole
record stays in the input topic at the offset its headers name.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from ... import __version__
from ...logs import get_logger
from ..deadletter import PREFIX_BYTES, carry_headers, dead_letter_headers, record_bytes, truncated

log = get_logger("olu.deadletter")

KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
REFRESH_SECONDS = 60.0
DESCRIBE_TIMEOUT_S = 5.0
SMALL_BYTES = PREFIX_BYTES + 8192
# the dead letter's olu.* headers: seven short values and a detail of <= 1024 characters
OLU_HEADER_BYTES = 6144


def topic_config(admin: AdminClient, topic: str, key: str) -> str:
    """The topic's ``key`` (its own value, or the broker's default), with DescribeConfigs; raises
    what the admin client raises. Keep ``admin`` until this returns: a dropped client cancels its
    request."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=DESCRIBE_TIMEOUT_S)
    return str(entries[key].value)


def topic_max_message_bytes(admin: AdminClient, topic: str) -> int:
    """The topic's ``max.message.bytes``."""
    return int(topic_config(admin, topic, "max.message.bytes"))


class TopicLimit:
    """``fits(key, value, headers)``: would the topic take this record? (Asks the broker lazily.)"""

    def __init__(self, admin_config: dict, topic: str, clock=time.monotonic):
        self.admin_config, self.topic, self.clock = admin_config, topic, clock
        self._admin: AdminClient | None = None
        self._limit: int | None = None
        self._asked_at = -REFRESH_SECONDS

    def fits(self, key: bytes | None, value: bytes | None, headers) -> bool:
        size = record_bytes(key, value, headers) + OLU_HEADER_BYTES
        # A record hardly larger than a truncated one is sent as it is: cutting would not help.
        return size <= SMALL_BYTES or size <= self.limit()

    def refused(self, size: int) -> None:
        """The topic refused a record of ``size`` bytes
        (``record_bytes``): its limit is below that."""
        self._limit = min(self.limit(), max(size - 1, 0))
        self._asked_at = self.clock()

    def limit(self) -> int:
        if self._limit is None or self.clock() - self._asked_at >= REFRESH_SECONDS:
            self._asked_at = self.clock()
            self._limit = self._describe()
        return self._limit

    def _describe(self) -> int:
        try:
            if self._admin is None:
                self._admin = AdminClient(self.admin_config)
            return topic_max_message_bytes(self._admin, self.topic)
        except Exception as exc:  # noqa: BLE001 - any failure: assume Kafka's default, say so
            log.warning("dead-letter topic limit unknown; assuming Kafka's default", extra={
                "topic": self.topic, "max_message_bytes": KAFKA_DEFAULT_MAX_MESSAGE_BYTES,
                "error": str(exc)})
            return KAFKA_DEFAULT_MAX_MESSAGE_BYTES


class DeadLetters:
    """Produces dead letters to ``topic`` through a given producer (the loop's, so a transactional
    worker's dead letters are in its transaction)."""

    def __init__(self, topic: str, limit: TopicLimit, *, transactional: bool):
        self.topic, self.limit, self.transactional = topic, limit, transactional

    def publish(self, producer, msg, reason: str, detail: str, failed) -> None:
        """Send ``msg``'s dead letter; ``failed(err)`` if it cannot be delivered even cut."""
        def delivered_whole(err, _msg):
            # The topic's limit is below this record (lowered since it was read): send the cut copy.
            # Not in a transaction: a refusal there aborts it, and the replay then cuts up front.
            if (err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
                and not self.transactional):
                self.limit.refused(record_bytes(msg.key(), msg.value(), msg.headers()))
                self._cut(producer, msg, reason, detail, failed, "refused by the dead-letter topic")
            elif err is not None:
                failed(err)

        if not self.limit.fits(msg.key(), msg.value(), msg.headers()):
            self._cut(producer, msg, reason, detail, failed,
                      "over the dead-letter topic's max.message.bytes")
            return
        try:
            self._produce(producer, msg, msg.key(), msg.value(), reason, detail,
                          carry_headers(msg.headers()),
                          delivered_whole)
        except KafkaException as exc:  # larger than the producer's own message.max.bytes
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            self._cut(producer, msg, reason, detail, failed,
                      "over the producer's message.max.bytes")

    def _cut(self, producer, msg, reason: str, detail: str, failed, cause: str) -> None:
        key, value, detail, header = truncated(msg.key(), msg.value(), detail)
        log.warning("dead letter truncated", extra={
            "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
            "cause": cause,
            "bytes": len(msg.key() or b"") + len(msg.value() or b""), "dlq_topic": self.topic})
        self._produce(producer, msg, key, value, reason, detail, [header],
                      lambda err, _msg: failed(err) if err is not None else None)

    def _produce(self, producer, msg, key, value, reason, detail, extra_headers, delivered) -> None:
        headers = dead_letter_headers(
            source_topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), reason=reason,
            detail=detail, worker_version=__version__, failed_at_ms=int(time.time() * 1000),
        ) + extra_headers
        producer.produce(self.topic, key=key, value=value, headers=headers, on_delivery=delivered)
