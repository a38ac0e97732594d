"""Enqueues events into the sbinbox outbox table through the caller's own transaction (docs/outbox.md, The contract).

The rows commit with the caller's business change or not at all; the sbinbox relay sends committed rows afterwards.
DB-API only: psycopg (3) or psycopg2 for PostgreSQL, pymssql or pyodbc for SQL Server; no driver is imported here.
"""

import json
from typing import Iterable, List, Optional, Sequence, Union

from .event import Event

#: The channel PostgreSQL relays LISTEN on; a pg_notify at enqueue wakes them when the transaction commits.
NOTIFY_CHANNEL = "sbinbox_outbox"
#: SQL Server takes 2,100 parameters a request (2 of them sp_executesql's), 9 a row: 233 rows an insert.
SQLSERVER_ROWS_PER_INSERT = 233
_POSTGRES_ROWS_PER_INSERT = 1000

_PG_COLUMNS = ['"MessageId"', '"Type"', '"Key"', '"Body"', '"Properties"', '"CorrelationId"', '"TraceParent"',
               '"TraceState"', '"SessionId"']
_MSSQL_COLUMNS = ["MessageId", "Type", "[Key]", "Body", "Properties", "CorrelationId", "TraceParent", "TraceState",
                  "SessionId"]


def dialect_of(connection) -> str:
    """'postgres' for psycopg/psycopg2, 'sqlserver' for pymssql/pyodbc; anything else must be named by the caller."""
    module = type(connection).__module__.split(".")[0]
    if module in ("psycopg", "psycopg2"):
        return "postgres"
    if module in ("pymssql", "_mssql", "pyodbc"):
        return "sqlserver"
    raise TypeError(f"enqueue knows psycopg, psycopg2, pymssql and pyodbc connections, not {module}: pass dialect=")


def _placeholder(connection) -> str:
    return "?" if type(connection).__module__.split(".")[0] == "pyodbc" else "%s"


def _check_transaction(connection) -> None:
    """Refuses a connection that cannot be inside the caller's transaction (autocommit outside one, or failed)."""
    info = getattr(connection, "info", None)
    status = getattr(info, "transaction_status", None)  # psycopg 3
    if status is None and hasattr(connection, "get_transaction_status"):
        status = connection.get_transaction_status()  # psycopg2: the same numbers
    if status is not None:
        if int(status) == 3:
            raise ValueError("enqueue: the connection's transaction has failed; roll it back")
        if int(status) == 0 and getattr(connection, "autocommit", False):
            raise ValueError("enqueue: the connection is in autocommit outside a transaction (begin one first)")
    elif isinstance(getattr(connection, "autocommit_state", None), bool):  # pymssql: autocommit is its setter
        if connection.autocommit_state:
            raise ValueError("enqueue: the connection is in autocommit (call autocommit(False), enqueue, then commit)")
    elif getattr(connection, "autocommit", False) is True:  # pyodbc
        raise ValueError("enqueue: the connection is in autocommit (set autocommit=False, enqueue, then commit)")


def _trace_context():
    """The caller's active OpenTelemetry span as (traceparent, tracestate), when opentelemetry is installed."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None, None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None, None
    parent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    state = ctx.trace_state.to_header() if ctx.trace_state else None
    return parent, state or None


def insert_sql(dialect: str, rows: int, with_session: bool, placeholder: str = "%s") -> str:
    """The insert of ``rows`` rows, numbered in the caller's order and inserted ORDER BY that number, so identity
    values (the relay's send order) follow it; without SessionId when no row has a key (a database at 0001)."""
    columns = (_PG_COLUMNS if dialect == "postgres" else _MSSQL_COLUMNS)[: 9 if with_session else 8]
    names = [f"c{i + 1}" for i in range(len(columns))] if dialect == "postgres" else columns
    table = '"Outbox"' if dialect == "postgres" else "dbo.Outbox"
    values = ",\n  ".join(f"({r + 1}, {', '.join([placeholder] * len(columns))})" for r in range(rows))
    return (
        f"INSERT INTO {table} ({', '.join(columns)})\n"
        f"SELECT {', '.join('v.' + n for n in names)}\n"
        f"FROM (VALUES\n  {values}\n) AS v (n, {', '.join(names)})\n"
        "ORDER BY v.n"
    )


def enqueue(
    connection,
    events: Union[Event, Iterable[Event]],
    *,
    notify: bool = True,
    dialect: Optional[str] = None,
) -> List[str]:
    """Writes the events, in the order given, through ``connection``'s open transaction; returns their MessageIds.

    Enqueue after your business writes, so that two transactions touching the same rows get outbox Ids in their
    commit order. Nothing is sent here. On PostgreSQL a pg_notify (delivered at commit) wakes the relays unless
    ``notify`` is False: notifying commits are serialised by PostgreSQL (docs/outbox.md).
    """
    listed: Sequence[Event] = [events] if isinstance(events, Event) else list(events)
    rows = []
    for i, event in enumerate(listed):
        where = f"outbox event {i} ({getattr(event, 'type', None)}:{getattr(event, 'key', None)})"
        if not isinstance(event, Event):
            raise TypeError(f"outbox event {i} is not an Event")
        message_id, body = event.check(where)
        properties = None
        if event.properties:
            properties = json.dumps(dict(event.properties), ensure_ascii=False, allow_nan=False)
        rows.append((message_id, event.type, event.key, body, properties, event.correlation_id, event.session_id))
    if not rows:
        return []
    on = dialect or dialect_of(connection)
    _check_transaction(connection)
    trace_parent, trace_state = _trace_context()
    with_session = any(r[6] is not None for r in rows)
    size = SQLSERVER_ROWS_PER_INSERT if on == "sqlserver" else _POSTGRES_ROWS_PER_INSERT
    cursor = connection.cursor()
    try:
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            params = []
            for message_id, type_, key, body, properties, correlation_id, session_id in chunk:
                params += [message_id, type_, key, body, properties, correlation_id, trace_parent, trace_state]
                if with_session:
                    params.append(session_id)
            cursor.execute(insert_sql(on, len(chunk), with_session, _placeholder(connection)), tuple(params))
        if notify and on == "postgres":
            cursor.execute(f"SELECT pg_notify('{NOTIFY_CHANNEL}', '')")
    finally:
        cursor.close()
    return [r[0] for r in rows]
