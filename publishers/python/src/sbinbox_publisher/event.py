"""One event and the checks every sbinbox publisher makes of it."""

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple, Union

from .message_id import derive_message_id

Property = Union[str, int, float, bool]
_RESERVED = {"traceparent", "tracestate", "diagnostic-id"}


def utf16_length(text: str) -> int:
    """The length as .NET, JavaScript and Service Bus count it (UTF-16 units): len() counts code points, and an
    emoji is one code point but two units, so a name that len() lets through would be refused by the relay's SDK."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


@dataclass(frozen=True)
class Event:
    """An event: its type (the message's subject), business key (with the type, the MessageId) and JSON body."""

    type: str
    key: str
    body: Any
    #: The session key (usually the aggregate's id) for a session-enabled entity; also the partition key.
    session_id: Optional[str] = None
    #: Extra application properties; the trace properties are set by the sender.
    properties: Optional[Mapping[str, Property]] = field(default_factory=dict)
    correlation_id: Optional[str] = None

    def check(self, where: str) -> Tuple[str, str]:
        """Returns (MessageId, body's JSON text), or raises ValueError/TypeError naming what is wrong and where."""
        if not isinstance(self.type, str) or not isinstance(self.key, str):
            raise TypeError(f"{where}: type and key must be strings")
        if utf16_length(self.type) > 200:
            raise ValueError(f"{where}: type is longer than 200 characters (UTF-16 units)")
        if utf16_length(self.key) > 400:
            raise ValueError(f"{where}: key is longer than 400 characters (UTF-16 units)")
        try:
            message_id = derive_message_id(self.type, self.key)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if self.session_id is not None and (
            not isinstance(self.session_id, str) or not 1 <= utf16_length(self.session_id) <= 128
        ):
            raise ValueError(
                f"{where}: session_id must be a string of 1 to 128 characters (UTF-16 units, Service Bus's limit)"
            )
        for name, value in (self.properties or {}).items():  # None: no properties, as in .NET
            if name.lower() in _RESERVED:
                raise ValueError(f'{where}: property "{name}" is set by the sender')
            if not isinstance(value, (str, int, float, bool)):
                raise TypeError(f'{where}: property "{name}" must be a string, number or boolean')
            if isinstance(value, float) and not math.isfinite(value):
                # JSON has no NaN or infinity: the relay would set the row aside as "stored properties are not JSON".
                raise ValueError(f'{where}: property "{name}" is {value}, not a finite number')
        if self.correlation_id is not None and utf16_length(self.correlation_id) > 128:
            raise ValueError(f"{where}: correlation_id is longer than 128 characters (UTF-16 units)")
        try:
            body = json.dumps(self.body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise TypeError(f"{where}: body is not JSON-serialisable ({error})") from None
        return message_id, body
