"""The Python publisher end to end (scripts/publishers-check.ts runs it):

    e2e.py <connection string> <queue> <PostgreSQL URL> <first note id> <CA file for the broker's TLS>
           [<SQL Server host> <port> <user> <password> <database>]

Publishes notes first+1..first+11 (first+1..first+5 and first+11 again: resends) and enqueues first+21..first+30
and first+36 in committed transactions, first+31..first+35 and first+37..first+38 in rolled-back ones, each beside a
row of "UpstreamChanges" (the business change); given a SQL Server, the same enqueues 50 notes on in dbo.Outbox
(pymssql). Its last line is a JSON summary.
"""

import json
import sys

import psycopg

from sbinbox_publisher import Event, Publisher, enqueue


def note(i: int) -> Event:
    return Event("NoteCreated", f"note-{i}", {"noteId": i, "text": f"from Python, note {i}"})


def outbox_plan(connection, change_sql: str, first: int):
    """Enqueues first+21..30 and first+36 committed, first+31..35 and first+37..38 rolled back, each beside its
    business row; then a bad event, which must fail the enqueue. Returns (committed, rolled back) MessageIds."""
    committed, rolled_back = [], []

    def transaction(events, commit: bool) -> None:
        cursor = connection.cursor()
        for e in events:  # the business change: the note's own row upstream (the bad event has none)
            if "noteId" in e.body:
                cursor.execute(change_sql, (e.body["noteId"], "python"))
        cursor.close()
        ids = enqueue(connection, events)
        if commit:
            connection.commit()
            committed.extend(ids)
        else:
            connection.rollback()
            rolled_back.extend(ids)

    transaction([note(i) for i in range(first + 21, first + 31)], commit=True)
    transaction([note(i) for i in range(first + 31, first + 36)], commit=False)
    e36 = note(first + 36)
    transaction([Event(e36.type, e36.key, e36.body, properties={"origin": "python", "attempt": 1})], commit=True)
    transaction([note(i) for i in range(first + 37, first + 39)], commit=False)
    try:
        transaction([note(first + 39), Event("Bad:Type", "1", {})], commit=True)
        raise AssertionError("e2e: an event type with ':' was enqueued")
    except ValueError as error:
        if "outbox event 1" not in str(error):
            raise
        connection.rollback()
    return committed, rolled_back


def refuses_autocommit(connection, event: Event) -> bool:
    """Whether enqueue refuses a connection in autocommit (the row would commit alone, without the business change)."""
    try:
        enqueue(connection, event)
    except ValueError as error:
        if "autocommit" in str(error):
            return True
        raise
    print(f"e2e: enqueue in autocommit was accepted on {type(connection).__module__}", file=sys.stderr)
    return False


def main(connection_string: str, queue: str, url: str, first: int, ca_file: str, sqlserver) -> int:
    published = []
    with Publisher.from_connection_string(connection_string, queue, connection_verify=ca_file) as publisher:
        published += publisher.publish_batch([note(i) for i in range(first + 1, first + 11)])
        publisher.publish_batch([note(i) for i in range(first + 1, first + 6)])  # a resend: the same ids
        published.append(publisher.publish("NoteCreated", f"note-{first + 11}", {"noteId": first + 11, "text": "one"}))
        publisher.publish("NoteCreated", f"note-{first + 11}", {"noteId": first + 11, "text": "one"})

    with psycopg.connect(url) as connection:
        committed, rolled_back = outbox_plan(
            connection, 'INSERT INTO "UpstreamChanges" ("NoteId", "Language") VALUES (%s, %s)', first
        )
        connection.autocommit = True
        if not refuses_autocommit(connection, note(first + 40)):
            return 1
    committed_sqlserver = rolled_back_sqlserver = None
    if sqlserver:
        import pymssql

        host, port, user, password, database = sqlserver
        with pymssql.connect(server=host, port=int(port), user=user, password=password, database=database) as mssql:
            committed_sqlserver, rolled_back_sqlserver = outbox_plan(
                mssql, "INSERT INTO dbo.UpstreamChanges (NoteId, Language) VALUES (%s, %s)", first + 50
            )
            mssql.autocommit(True)
            if not refuses_autocommit(mssql, note(first + 90)):
                return 1

    summary = {"published": published, "committed": committed, "rolledBack": rolled_back}
    summary.update(committedSqlServer=committed_sqlserver, rolledBackSqlServer=rolled_back_sqlserver)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (6, 11):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:]))
