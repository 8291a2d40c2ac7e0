"""Subscribe to released parameters: the latest model of every input partition, ready to predict.

The worker publishes a release on the parameter topic (default ``olu.params``) each time a
partition's model changes in a way worth publishing (schemas/release.schema.json). Releases are
at-least-once with identical duplicates, and ``version`` is strictly increasing per
``(topic, partition)``, so a subscriber keeps, per input partition, the release with the highest
version and ignores the rest::

    from worker.client import ParamsSubscriber

    with ParamsSubscriber("broker:9092") as sub:
        sub.run_until(caught_up=True, timeout=30)  # everything published so far
        sub.predict([0.1, 0.2, 0.3])               # average of all partitions' models
        sub.predict_proba([0.1, 0.2, 0.3])         # softmax: {class label: probability}
        sub.predict([0.1, 0.2, 0.3], partition=0)  # one partition's model
        while True:
            for release in sub.poll(1.0):          # new versions as they come
                print(release.topic, release.partition, release.version)

A softmax release carries its K labels in ``classes`` and its K x dim weight matrix row by row
(row k = class ``classes[k]``): ``predict`` gives the most probable label, ``predict_proba`` all.

Every record is checked before it is used (required fields, types, ``len(weights) == dim`` or,
for softmax, K x dim with valid ``classes``, finite numbers, key ``"{topic}/{partition}"``): a
record that fails is counted in :attr:`ParamsSubscriber.stats`, handed to ``on_invalid`` and
skipped.

A subscriber commits nothing, so it reads the parameter topic from the beginning every time it
is assigned a partition (``auto.offset.reset=earliest``) and rebuilds its state from the topic.
With ``group_id=None`` (the default) each subscriber has a group of its own and sees every
partition. Subscribers that share a ``group_id`` split the parameter topic's partitions between
them (use a group nothing else commits offsets for).

Releases in a Schema Registry format (the worker's ``OLU_RELEASE_FORMAT`` avro or json-schema)
are read when ``schema_registry`` is given (its URL, or a ``SchemaRegistryClient`` configuration
dict): each framed value is decoded with its registered schema and then checked like a JSON one;
``raw`` keeps the bytes as received. JSON and framed releases may be mixed on one topic. Without
``schema_registry`` a framed release is reported invalid (``needs_registry``).

Use ``isolation="read_committed"`` (the default) when the worker runs with ``transactional``:
``read_uncommitted`` would also show releases of aborted transactions.

The modules, one job each: release.py (a record decoded and checked into a :class:`ModelRelease`),
predict.py (what a release's weights predict under each loss) and subscriber.py (following the
topic: :class:`ParamsSubscriber`).
"""

from __future__ import annotations

# DEFAULT_TOPIC, SCHEMA_VERSION and the loss sets: importable from worker.client as before
from ..exceptions import InvalidRelease
from ..wire import PARAMS_TOPIC as DEFAULT_TOPIC  # noqa: F401
from ..wire import RELEASE_SCHEMA_VERSION as SCHEMA_VERSION  # noqa: F401
from .predict import (  # noqa: F401
    LINEAR_LOSSES,
    LOGISTIC_LOSSES,
    LOSSES,
    MULTICLASS_LOSSES,
    sigmoid,
    softmax,
)
from .release import ModelRelease, parse_release
from .subscriber import ParamsSubscriber

__all__ = ["InvalidRelease", "ModelRelease", "ParamsSubscriber", "parse_release", "sigmoid",
           "softmax"]
