"""Kafka: an input reading a topic's partitions (peer.plugins.kafka.source), and outputs writing
a topic at least once or exactly once (peer.plugins.kafka.sink), through librdkafka
(confluent-kafka). Their params are typed and checked at submit (peer.plugins.kafka.settings).

- ``peer.plugins.kafka:input``: a topic read from each partition's checkpointed offset.
- ``peer.plugins.kafka:output``: records produced as segments come (at least once).
- ``peer.plugins.kafka:exactly_once_output``: each committed epoch produced in one transaction
  per slot; readers with ``isolation.level=read_committed`` see each record once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peer.job.spec import Task
from peer.plugins import checks_params, error
from peer.plugins.delivered import DeliveredOutput
from peer.plugins.kafka.settings import KafkaInputParams, KafkaOutputParams, client_config
from peer.plugins.kafka.sink import Encoder, KafkaOutput, TransactionalDelivery
from peer.plugins.kafka.source import KafkaInput, WatermarkedInput
from peer.plugins.params import parsed, settings
from peer.plugins.splits import Splits


def _source(params: Mapping[str, Any]) -> None:
    parsed(KafkaInputParams, params)


def _sink(params: Mapping[str, Any]) -> None:
    parsed(KafkaOutputParams, params)


def _exactly_once(params: Mapping[str, Any]) -> None:
    sink = parsed(KafkaOutputParams, params)
    if not sink.transactional_id:
        raise ValueError("transactional_id is required: the start of each slot's transactional "
                         "id, stable for the life of the job")  # fmt: skip
    if not sink.staging:
        raise ValueError("staging is required: a directory or object store URL where each "
                         "epoch's records wait for its commit")  # fmt: skip


@checks_params(_source)
def input(task: Task, slot: int, slots: int, *, splits: Splits) -> KafkaInput:
    """The factory named ``peer.plugins.kafka:input``."""
    source = settings(task, KafkaInputParams)
    reader = KafkaInput if source.event_time is None else WatermarkedInput
    return reader(task, source, splits)


@checks_params(_sink)
def output(task: Task, slot: int, slots: int) -> KafkaOutput:
    """The factory named ``peer.plugins.kafka:output``."""
    return KafkaOutput(task, settings(task, KafkaOutputParams))


@checks_params(_exactly_once)
def exactly_once_output(task: Task, slot: int, slots: int) -> DeliveredOutput:
    """The factory named ``peer.plugins.kafka:exactly_once_output``."""
    try:
        _exactly_once(task.params)
    except ValueError as e:
        raise error(task, f"params: {e}") from None
    params = settings(task, KafkaOutputParams)
    config = client_config(task, params)
    delivery = TransactionalDelivery(task, params, slot, config)
    staging = params.staging or ""
    return DeliveredOutput(task, staging, slot, delivery, record=Encoder(task, params, config),
                           finish=delivery.mark_ends)  # fmt: skip
