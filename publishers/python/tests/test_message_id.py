"""The shared MessageId vectors (test/fixtures/message-id-vectors.json) and the event checks."""

import json
import pathlib
import unittest

from sbinbox_publisher import MESSAGE_ID_NAMESPACE, Event, derive_message_id, to_message, uuid_v5
from sbinbox_publisher.outbox import enqueue, insert_sql

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "test" / "fixtures" / "message-id-vectors.json"


def units(codes):
    return "".join(chr(c) for c in codes)


class Vectors(unittest.TestCase):
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))

    def test_namespace(self):
        self.assertEqual(self.vectors["namespace"], MESSAGE_ID_NAMESPACE)

    def test_derived(self):
        self.assertGreaterEqual(len(self.vectors["derived"]), 20)
        for v in self.vectors["derived"]:
            with self.subTest(type=v["type"], key=v["key"][:20]):
                self.assertEqual(derive_message_id(v["type"], v["key"]), v["messageId"])

    def test_uuid_v5(self):
        for v in self.vectors["uuidV5"]:
            self.assertEqual(uuid_v5(v["name"], v["namespace"]), v["id"])

    def test_refused(self):
        self.assertGreaterEqual(len(self.vectors["refused"]), 5)
        for v in self.vectors["refused"]:
            with self.subTest(why=v["why"]):
                with self.assertRaises(ValueError):
                    derive_message_id(units(v["typeUnits"]), units(v["keyUnits"]))

    def test_refused_events(self):
        # Lengths in UTF-16 units, as the relay's SDK and Service Bus count them: an emoji is two.
        self.assertGreaterEqual(len(self.vectors["refusedEvents"]), 3)
        for v in self.vectors["refusedEvents"]:
            with self.subTest(why=v["why"]):
                event = Event(v["type"], v["key"], {}, session_id=v.get("sessionId"))
                with self.assertRaisesRegex(ValueError, r"^event: .*UTF-16 units"):
                    event.check("event")


class Messages(unittest.TestCase):
    def test_message_the_worker_reads(self):
        m = to_message(Event("NoteCreated", "42", {"noteId": 42, "text": "héllo"}, properties={"origin": "py"}))
        self.assertEqual(m.message_id, "bdc4ce33-cf0f-55d8-b0c5-f199e0f5c8eb")
        self.assertEqual(m.subject, "NoteCreated")
        self.assertEqual(m.content_type, "application/json")
        self.assertEqual(b"".join(m.body), '{"noteId":42,"text":"héllo"}'.encode("utf-8"))

    def test_bad_events_are_named(self):
        with self.assertRaisesRegex(ValueError, 'event: property "traceparent" is set by the sender'):
            to_message(Event("T", "1", {}, properties={"traceparent": "x"}))
        with self.assertRaisesRegex(TypeError, "body is not JSON-serialisable"):
            to_message(Event("T", "1", object()))
        with self.assertRaisesRegex(ValueError, "session_id must be a string of 1 to 128"):
            to_message(Event("T", "1", {}, session_id="s" * 129))

    def test_properties_none_is_no_properties(self):
        m = to_message(Event("T", "1", {}, properties=None))
        self.assertIsNone(m.application_properties)
        self.assertEqual(Event("T", "1", {}, properties=None).check("event"), (derive_message_id("T", "1"), "{}"))

    def test_non_finite_properties_are_refused(self):
        for value in (float("nan"), float("inf"), float("-inf")):
            with self.subTest(value=value):
                named = f'outbox event 0 \\(T:1\\): property "n" is {value}, not a finite number'
                with self.assertRaisesRegex(ValueError, named):
                    enqueue(None, Event("T", "1", {}, properties={"n": value}), dialect="postgres")
                with self.assertRaisesRegex(ValueError, 'event: property "n" is .*, not a finite number'):
                    to_message(Event("T", "1", {}, properties={"n": value}))

    def test_sqlserver_insert_has_the_typescript_shape(self):
        sql = insert_sql("sqlserver", 2, True)
        self.assertIn("INSERT INTO dbo.Outbox (MessageId, Type, [Key], Body, Properties, CorrelationId", sql)
        self.assertEqual(sql.count("%s"), 18)
        self.assertTrue(sql.endswith("ORDER BY v.n"))


if __name__ == "__main__":
    unittest.main()
