import assert from "node:assert/strict";
import rhea, { type Connection, type EventContext, type Receiver, type Sender } from "rhea";
import { brokerConfig, useLocalBroker, waitUntil } from "../helpers/broker.ts";
import {
  frames,
  framesBeforeAttach,
  framesOutsideSession,
  startFrameTap,
  type FrameTap,
} from "../helpers/frame-tap.ts";

/**
 * The .NET SDK sends its credit (and a management request) right behind an attach, without waiting for the
 * broker's attach. Service Bus always answers the attach first; a transfer or flow on a handle the client has not
 * seen attached ends the session (amqp:session:unattached-handle). rhea's client does the same as .NET here:
 * `add_credit` in the tick of `open_receiver` puts attach and flow in one write, so these tests reproduce it.
 */
describe("local broker: frame order at link level (attach before anything else on the link)", () => {
  // one queue a test, so a failed test leaves nothing behind for the next
  const fixture = useLocalBroker(
    brokerConfig({
      sbinbox: {},
      "receive-and-delete": {},
      "peek-lock": {},
      drain: {},
      refused: {},
      echo: {},
    }),
  );
  let tap: FrameTap;
  let connection: Connection;
  const errors: string[] = [];

  beforeEach(async () => {
    tap = await startFrameTap(fixture.broker.port);
    errors.length = 0;
    const container = rhea.create_container();
    container.on("error", (e: unknown) => errors.push(String((e as Error).message ?? e)));
    connection = container.connect({ host: "127.0.0.1", port: tap.port, reconnect: false });
    connection.on("connection_error", (c: EventContext) => errors.push(JSON.stringify(c.connection.error)));
    connection.on("session_error", (c: EventContext) => errors.push(JSON.stringify(c.session?.error)));
    connection.on("protocol_error", (c: EventContext) => errors.push(String(c.error)));
    await new Promise<void>((resolve) => connection.once("connection_open", () => resolve()));
  });

  afterEach(async () => {
    const closed = new Promise<void>((resolve) => {
      connection.once("connection_close", () => resolve());
      connection.once("disconnected", () => resolve());
    });
    connection.close();
    await closed;
    await tap.close();
    // After the close, so the broker's end of each session is among the frames checked.
    assert.deepEqual(framesOutsideSession(tap.frames), []);
  });

  /** Waits for an event, or fails at once with the client's first error (a session ended by the client). */
  async function orError<T>(event: Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const failed = new Promise<never>((_, reject) => {
      timer = setInterval(() => {
        if (errors.length > 0) reject(new Error(`client error: ${errors.join("; ")}`));
      }, 20);
    });
    try {
      return await Promise.race([event, failed]);
    } finally {
      clearInterval(timer);
    }
  }

  async function fill(queue: string, count: number): Promise<void> {
    const sender = fixture.client.createSender(queue);
    await sender.sendMessages(
      Array.from({ length: count }, (_, i) => ({ body: i, messageId: `${queue}-${i}` })),
    );
    await sender.close();
  }

  for (const mode of ["receive-and-delete", "peek-lock"] as const) {
    it(`delivers prefetched messages only after its attach (${mode}, credit sent with the attach)`, async () => {
      await fill(mode, 10);
      const receiver: Receiver = connection.open_receiver({
        source: { address: mode },
        credit_window: 0,
        autoaccept: false,
        snd_settle_mode: mode === "receive-and-delete" ? 1 : 0,
        rcv_settle_mode: mode === "receive-and-delete" ? 0 : 1,
      });
      receiver.add_credit(5);
      const received: string[] = [];
      receiver.on("message", (c: EventContext) => {
        received.push(String(c.message?.message_id));
        if (mode === "peek-lock") c.delivery?.accept();
      });
      await waitUntil(() => received.length === 5 || errors.length > 0, "5 messages or an error");
      assert.deepEqual(errors, []);
      assert.deepEqual(framesBeforeAttach(tap.frames, tap.clientFrames), []);
      assert.equal(received.length, 5);
      // The other five are still in the queue: nothing was sent into a handle the client could not see.
      receiver.close();
      await waitUntil(() => fixture.broker.counts(mode).locked === 0, "no message left locked");
      assert.equal(fixture.broker.counts(mode).active, 5);
      const drainer = fixture.client.createReceiver(mode, { receiveMode: "receiveAndDelete" });
      let rest = 0;
      for (let got = 1; got > 0 && rest < 5; rest += got)
        got = (await drainer.receiveMessages(5 - rest, { maxWaitTimeInMs: 2000 })).length;
      await drainer.close();
      assert.equal(rest, 5);
    });
  }

  it("answers a drain sent with the attach after the attach, on an empty queue", async () => {
    const receiver: Receiver = connection.open_receiver({ source: { address: "drain" }, credit_window: 0 });
    receiver.add_credit(3);
    receiver.drain_credit();
    const drained = new Promise<void>((resolve) => receiver.once("receiver_drained", () => resolve()));
    await orError(drained);
    assert.deepEqual(errors, []);
    assert.deepEqual(framesBeforeAttach(tap.frames, tap.clientFrames), []);
    const mine = tap.frames.filter((f) => f.handle === tap.frames.find((a) => a.name === "attach")?.handle);
    assert.deepEqual(
      mine.map((f) => f.name),
      ["attach", "flow"],
    );
  });

  for (const entity of ["sbinbox/$management", "$cbs"]) {
    it(`writes the reply link's attach before a reply to a request sent with it (${entity})`, async () => {
      const requests: Sender = connection.open_sender({ target: { address: entity } });
      await orError(new Promise<void>((resolve) => requests.once("sendable", () => resolve())));
      const replyTo = `reply-${entity.length}`;
      const replies: Receiver = connection.open_receiver({
        source: { address: entity },
        target: { address: replyTo },
        name: replyTo,
        credit_window: 0,
      });
      replies.add_credit(1);
      const reply = new Promise<EventContext>((resolve) => replies.once("message", resolve));
      // rhea, like .NET, would write a transfer before its own pending attach: the request goes one tick later,
      // so the broker reads the attach, the credit and the request together.
      await new Promise((resolve) => setImmediate(resolve));
      requests.send({
        message_id: "req-1",
        reply_to: replyTo,
        application_properties:
          entity === "$cbs"
            ? {
                operation: "put-token",
                name: "sb://localhost/sbinbox",
                type: "servicebus.windows.net:sastoken",
              }
            : { operation: "com.microsoft:peek-message" },
        body:
          entity === "$cbs"
            ? "token"
            : { "from-sequence-number": rhea.types.wrap_long(0), "message-count": 1 },
      });
      const { message } = await orError(reply);
      assert.equal(message?.correlation_id, "req-1");
      assert.deepEqual(errors, []);
      assert.deepEqual(framesBeforeAttach(tap.frames, tap.clientFrames), []);
    });
  }

  it("refuses an unknown queue with attach then detach, even when credit came with the attach", async () => {
    const receiver: Receiver = connection.open_receiver({
      source: { address: "no-such-queue" },
      credit_window: 0,
    });
    receiver.add_credit(5);
    const closed = new Promise<EventContext>((resolve) => receiver.once("receiver_error", resolve));
    const { receiver: link } = await orError(closed);
    assert.equal((link?.error as { condition?: string } | undefined)?.condition, "amqp:not-found");
    assert.deepEqual(framesBeforeAttach(tap.frames, tap.clientFrames), []);
    const handle = tap.frames.find((f) => f.name === "attach")?.handle;
    assert.deepEqual(
      tap.frames.filter((f) => f.handle === handle && f.name !== "flow").map((f) => f.name),
      ["attach", "detach"],
    );
  });
  it("answers a flow with echo set by its own flow on that link (rhea alone ignores echo)", async () => {
    const receiver: Receiver = connection.open_receiver({ source: { address: "echo" }, credit_window: 0 });
    await orError(new Promise<void>((resolve) => receiver.once("receiver_open", () => resolve())));
    const handle = tap.frames.find((f) => f.name === "attach")?.handle;
    const before = tap.frames.filter((f) => f.name === "flow" && f.handle === handle).length;
    // rhea's client cannot set echo, so the frame is written through its session as the .NET client would send it.
    const session = (receiver as unknown as { session: { output(frame: unknown): void } }).session;
    const local = (receiver as unknown as { local: { handle: number } }).local.handle;
    session.output(
      frames.flow({
        next_incoming_id: 0,
        incoming_window: 2048,
        next_outgoing_id: 0,
        outgoing_window: 2048,
        handle: local,
        delivery_count: 0,
        link_credit: 0,
        echo: true,
      }),
    );
    await orError(
      waitUntil(
        () => tap.frames.filter((f) => f.name === "flow" && f.handle === handle).length > before,
        "the broker's flow on the echoed link",
      ),
    );
    assert.deepEqual(errors, []);
    assert.deepEqual(framesBeforeAttach(tap.frames, tap.clientFrames), []);
  });

  it("the session check itself flags a frame before its session's begin and one after its end", () => {
    const frame = (name: string, channel = 1, handle?: number) => ({ name, channel, handle });
    assert.deepEqual(
      framesOutsideSession([
        frame("open", 0),
        frame("attach", 1, 0),
        frame("begin"),
        frame("attach", 1, 0),
        frame("end"),
        frame("flow", 1, 0),
        frame("close", 0),
      ]),
      [frame("attach", 1, 0), frame("flow", 1, 0)],
    );
  });

  it("the link check ties a disposition to its link through the client's transfer, and flags one before the attach", () => {
    // The client attached link "req" on its channel 3 / handle 7 and sent delivery 42 on it; the broker answers
    // on its channel 0 (begin naming remote channel 3), where its handle for "req" is 1.
    const client = [
      { name: "begin", channel: 3, handle: undefined, seq: 0 },
      { name: "attach", channel: 3, handle: 7, linkName: "req", seq: 1 },
      { name: "transfer", channel: 3, handle: 7, deliveryId: 42, seq: 2 },
    ];
    const begin = { name: "begin", channel: 0, handle: undefined, remoteChannel: 3, seq: 3 };
    const attach = { name: "attach", channel: 0, handle: 1, linkName: "req", seq: 4 };
    const settle = {
      name: "disposition",
      channel: 0,
      handle: undefined,
      role: true,
      first: 42,
      last: 42,
      seq: 5,
    };
    assert.deepEqual(framesBeforeAttach([begin, attach, settle], client), []);
    const early = { ...settle, seq: 4 };
    assert.deepEqual(framesBeforeAttach([begin, early, { ...attach, seq: 5 }], client), [early]);
    const unknown = { ...settle, first: 43, last: 43 };
    assert.deepEqual(framesBeforeAttach([begin, attach, unknown], client), [unknown]);
  });
});
