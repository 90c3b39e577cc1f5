"""NATS JetStream: an input reading a stream (peer.plugins.nats.source) and an exactly-once
output publishing to one (peer.plugins.nats.sink), through nats-py on an event loop of each
plugin's own (peer.plugins.nats.client). Their params are typed and checked at submit
(peer.plugins.nats.settings).

- ``peer.plugins.nats:input``: a stream's messages, each slot reading the splits of the stream's
  sequence it owns through an ordered consumer, its position the stream sequence.
- ``peer.plugins.nats:exactly_once_output``: each committed epoch published with message ids
  made of the job's prefix, the staged epoch and the record's place, so that JetStream's
  duplicate window makes an epoch delivered again store nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from peer.job.spec import Task
from peer.plugins import checks_params
from peer.plugins.delivered import DeliveredOutput
from peer.plugins.nats.settings import NatsInputParams, NatsOutputParams
from peer.plugins.nats.sink import JetStreamDelivery, NatsEncoder
from peer.plugins.nats.source import NatsInput
from peer.plugins.params import parsed, settings
from peer.plugins.splits import Splits


def _source(params: Mapping[str, Any]) -> None:
    parsed(NatsInputParams, params)


def _sink(params: Mapping[str, Any]) -> None:
    parsed(NatsOutputParams, params)


@checks_params(_source)
def input(task: Task, slot: int, slots: int, *, splits: Splits) -> NatsInput:
    """The factory named ``peer.plugins.nats:input``."""
    return NatsInput(task, settings(task, NatsInputParams), splits)


@checks_params(_sink)
def exactly_once_output(task: Task, slot: int, slots: int) -> DeliveredOutput:
    """The factory named ``peer.plugins.nats:exactly_once_output``: a JetStream delivery, and
    how a segment becomes the message it publishes."""
    params = settings(task, NatsOutputParams)
    delivery = JetStreamDelivery(task, params, slot)
    return DeliveredOutput(task, params.staging, slot, delivery,
                           record=NatsEncoder(task, params, delivery.known))  # fmt: skip
