"""Publishes to an sbinbox worker: the same MessageIds, message shape and outbox as the TypeScript publisher."""

from .message_id import MESSAGE_ID_NAMESPACE, derive_message_id, uuid_v5
from .event import Event
from .publisher import Publisher, to_message
from .outbox import NOTIFY_CHANNEL, enqueue

__all__ = [
    "MESSAGE_ID_NAMESPACE",
    "NOTIFY_CHANNEL",
    "Event",
    "Publisher",
    "derive_message_id",
    "enqueue",
    "to_message",
    "uuid_v5",
]
