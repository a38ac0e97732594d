"""The Python publisher end to end (scripts/publishers-check.ts runs it):

    e2e.py <connection string> <queue> <PostgreSQL URL> <first note id> <CA file for the broker's TLS>

Publishes notes first+1..first+11 (first+1..first+5 and first+11 again: resends) and enqueues first+21..first+30
and first+36 in committed transactions, first+31..first+35 and first+37..first+38 in rolled-back ones, each beside a
row of "UpstreamChanges" (the business change). Its last line is a JSON summary.
"""

import json
import sys

import psycopg

from sbinbox_publisher import Event, Publisher, enqueue


def note(i: int) -> Event:
    return Event("NoteCreated", f"note-{i}", {"noteId": i, "text": f"from Python, note {i}"})


def main(connection_string: str, queue: str, url: str, first: int, ca_file: str) -> int:
    published = []
    with Publisher.from_connection_string(connection_string, queue, connection_verify=ca_file) as publisher:
        published += publisher.publish_batch([note(i) for i in range(first + 1, first + 11)])
        publisher.publish_batch([note(i) for i in range(first + 1, first + 6)])  # a resend: the same ids
        published.append(publisher.publish("NoteCreated", f"note-{first + 11}", {"noteId": first + 11, "text": "one"}))
        publisher.publish("NoteCreated", f"note-{first + 11}", {"noteId": first + 11, "text": "one"})

    committed, rolled_back = [], []
    with psycopg.connect(url) as connection:

        def transaction(events, commit: bool) -> None:
            with connection.cursor() as cursor:
                for e in events:  # the business change: the note's own row upstream (the bad event has none)
                    if "noteId" not in e.body:
                        continue
                    cursor.execute(
                        'INSERT INTO "UpstreamChanges" ("NoteId", "Language") VALUES (%s, %s)', (e.body["noteId"], "python")
                    )
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
        try:  # a bad event fails the enqueue before anything is written, naming it
            transaction([note(first + 39), Event("Bad:Type", "1", {})], commit=True)
            print("e2e: an event type with ':' was enqueued", file=sys.stderr)
            return 1
        except ValueError as error:
            if "outbox event 1" not in str(error):
                raise
            connection.rollback()
        connection.autocommit = True
        try:
            enqueue(connection, note(first + 40))
            print("e2e: enqueue outside a transaction was accepted", file=sys.stderr)
            return 1
        except ValueError:
            pass

    print(json.dumps({"published": published, "committed": committed, "rolledBack": rolled_back}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
