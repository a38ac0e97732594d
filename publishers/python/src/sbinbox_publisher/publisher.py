"""Sends events to a queue or topic an sbinbox worker reads, with the message shape the worker decodes."""

from typing import Iterable, List, Optional

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from .event import Event


def to_message(event: Event, where: str = "event") -> ServiceBusMessage:
    """The message sbinbox sends: derived MessageId, the type as subject, application/json, UTF-8 JSON bytes."""
    message_id, body = event.check(where)
    return ServiceBusMessage(
        body.encode("utf-8"),  # bytes: an AMQP data section, as the worker expects
        message_id=message_id,
        subject=event.type,
        content_type="application/json",
        correlation_id=event.correlation_id,
        session_id=event.session_id,
        partition_key=event.session_id,
        application_properties=dict(event.properties or {}) or None,
    )


class Publisher:
    """A publisher on one queue or topic. A resend of an event carries the same MessageId, so it is dropped."""

    def __init__(self, client: ServiceBusClient, queue_or_topic: str, *, owns_client: bool = False):
        self._client = client
        self._owns_client = owns_client
        self._sender = client.get_queue_sender(queue_or_topic)

    @classmethod
    def create(cls, fully_qualified_namespace: str, queue_or_topic: str, credential=None) -> "Publisher":
        """Through Microsoft Entra ID: DefaultAzureCredential unless given (managed identity in Azure)."""
        if credential is None:
            from azure.identity import DefaultAzureCredential

            credential = DefaultAzureCredential()
        client = ServiceBusClient(fully_qualified_namespace, credential)
        return cls(client, queue_or_topic, owns_client=True)

    @classmethod
    def from_connection_string(cls, connection_string: str, queue_or_topic: str, **client_options) -> "Publisher":
        client = ServiceBusClient.from_connection_string(connection_string, **client_options)
        return cls(client, queue_or_topic, owns_client=True)

    def publish(self, type_: str, key: str, body, *, session_id: Optional[str] = None) -> str:
        """Sends one event; returns its MessageId."""
        return self.publish_batch([Event(type_, key, body, session_id=session_id)])[0]

    def publish_batch(self, events: Iterable[Event]) -> List[str]:
        """Checks and builds every event first (a bad one fails the call, nothing sent), then sends in order in
        batches filled to the entity's size limit, a new batch wherever the session key changes (a partitioned
        entity refuses several partition keys in one batch). Returns the MessageIds in order."""
        messages = [to_message(e, f"event {i}") for i, e in enumerate(events)]
        batch = self._sender.create_message_batch()
        session = None
        for message in messages:
            if len(batch) > 0 and message.session_id != session:
                self._sender.send_messages(batch)
                batch = self._sender.create_message_batch()
            session = message.session_id
            try:
                batch.add_message(message)
            except ValueError:  # MessageSizeExceededError is a ValueError
                if len(batch) == 0:
                    raise ValueError(f"event {message.message_id} is larger than the entity's maximum message size")
                self._sender.send_messages(batch)
                batch = self._sender.create_message_batch()
                batch.add_message(message)
        if len(batch) > 0:
            self._sender.send_messages(batch)
        return [m.message_id for m in messages]

    def close(self) -> None:
        self._sender.close()
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
