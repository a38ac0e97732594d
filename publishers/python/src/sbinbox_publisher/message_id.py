"""The MessageId of an event, exactly as every sbinbox publisher derives it (docs/publisher.md)."""

import uuid

#: The sbinbox namespace: fixed forever, since changing it would change every id.
MESSAGE_ID_NAMESPACE = "f5dfdc27-9e31-4822-becc-050e35acb0fa"
_NAMESPACE = uuid.UUID(MESSAGE_ID_NAMESPACE)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate has no UTF-8 encoding, so the name has no id (never hashed as U+FFFD).
        raise ValueError(f"{what} has a lone surrogate (not valid Unicode text, no UTF-8 encoding)") from None


def canonical_name(type_: str, key: str) -> str:
    """``type:key`` exactly as given: no trimming, case folding or normalisation; no ':' in the type."""
    if not isinstance(type_, str) or not isinstance(key, str):
        raise TypeError("event type and business key must be strings")
    if type_ == "":
        raise ValueError("event type must not be empty")
    if ":" in type_:
        raise ValueError(f'event type "{type_}" must not contain ":"')
    if key == "":
        raise ValueError("business key must not be empty")
    _utf8(type_, "event type")
    _utf8(key, "business key")
    return f"{type_}:{key}"


def uuid_v5(name: str, namespace: str) -> str:
    """UUID version 5 (RFC 9562, SHA-1) of ``name`` as UTF-8 in ``namespace``, lower-case 8-4-4-4-12."""
    return str(uuid.uuid5(uuid.UUID(namespace), name))


def derive_message_id(type_: str, key: str) -> str:
    """The MessageId of an event: the same for every retry and every process, in any language, that sends it."""
    return str(uuid.uuid5(_NAMESPACE, canonical_name(type_, key)))
