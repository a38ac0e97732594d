import assert from "node:assert/strict";
import { connect as tcpConnect } from "node:net";
import rhea, { type Connection, type EventContext } from "rhea";
import { within } from "../../src/domain/within.ts";
import { useLocalBroker } from "../helpers/broker.ts";

/** A raw rhea client, to send what the SDK never would. */
async function openRhea(port: number): Promise<Connection> {
  const container = rhea.create_container();
  const connection = container.connect({ host: "127.0.0.1", port, reconnect: false });
  await new Promise<void>((resolve, reject) => {
    connection.once("connection_open", () => resolve());
    connection.once("connection_error", (c: EventContext) =>
      reject(new Error(JSON.stringify(c.connection.error))),
    );
  });
  return connection;
}

async function roundTrip(fixture: ReturnType<typeof useLocalBroker>, id: string): Promise<void> {
  const sender = fixture.client.createSender("sbinbox");
  await sender.sendMessages({ body: id, messageId: id });
  await sender.close();
  const receiver = fixture.client.createReceiver("sbinbox");
  const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
  assert.equal(message?.messageId, id);
  await receiver.completeMessage(message);
  await receiver.close();
}

describe("local broker: robustness", () => {
  const fixture = useLocalBroker();

  it("survives garbage on a socket and keeps serving the SDK", async () => {
    const socket = tcpConnect({ host: "127.0.0.1", port: fixture.broker.port });
    await once(socket, "connect");
    // A valid protocol header, then a 16-byte frame whose body is not an AMQP performative.
    socket.write(Buffer.from("AMQP\x00\x01\x00\x00", "binary"));
    socket.write(Buffer.from([0, 0, 0, 16, 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]));
    const ending = await new Promise<string>((resolve) => {
      socket.on("close", () => resolve("closed by the broker"));
      socket.on("error", () => resolve("closed by the broker"));
      setTimeout(() => resolve("still open"), 5000);
    });
    socket.destroy();
    assert.equal(ending, "closed by the broker");
    await roundTrip(fixture, "after-garbage");
  });

  it("answers an unknown $management operation with an AMQP error status instead of failing", async () => {
    const connection = await openRhea(fixture.broker.port);
    const replyTo = "reply-link-1";
    const receiver = connection.open_receiver({
      source: { address: "sbinbox/$management" },
      target: { address: replyTo },
      name: replyTo,
    });
    const sender = connection.open_sender({ target: { address: "sbinbox/$management" } });
    const reply = new Promise<EventContext>((resolve) => receiver.once("message", resolve));
    await once(sender, "sendable");
    sender.send({
      message_id: "req-1",
      reply_to: replyTo,
      application_properties: { operation: "com.microsoft:frobnicate" },
      body: {},
    });
    const { message } = await reply;
    assert.equal(message?.correlation_id, "req-1");
    assert.equal(message?.application_properties?.["statusCode"], 501);
    assert.equal(message?.application_properties?.["errorCondition"], "amqp:not-implemented");
    connection.close();
    await roundTrip(fixture, "after-unknown-operation");
  });

  it("answers a CBS put-token without reply-to on the $cbs reply link of its session (uamqp-c, Python SDK 7.8)", async () => {
    const connection = await openRhea(fixture.broker.port);
    // As uamqp-c does: both $cbs links on one session, a request with a message id and no reply-to.
    const receiver = connection.open_receiver({ source: { address: "$cbs" }, target: { address: "$cbs" } });
    const sender = connection.open_sender({ target: { address: "$cbs" }, source: { address: "$cbs" } });
    const reply = new Promise<EventContext>((resolve) => receiver.once("message", resolve));
    await once(sender, "sendable");
    sender.send({
      message_id: 7,
      application_properties: {
        operation: "put-token",
        type: "servicebus.windows.net:sastoken",
        name: "sb://127.0.0.1/sbinbox",
      },
      body: "SharedAccessSignature sr=x&sig=y&se=1&skn=z",
    });
    // Bounded: an unanswered request (as before the broker answered one without reply-to) fails here, by name.
    assert.ok(await within(reply, 5_000), "no answer on the $cbs reply link within 5 s");
    const { message } = await reply;
    assert.equal(message?.correlation_id, 7);
    assert.equal(message?.application_properties?.["status-code"], 202);
    connection.close();
  });

  it("refuses a session receiver on a queue without sessions at once, with a clear error", async () => {
    await assert.rejects(
      fixture.client.acceptNextSession("sbinbox", { maxAutoLockRenewalDurationInMs: 0 }),
      (error: unknown) => {
        assert.match(String((error as Error).message), /'sbinbox' has RequiresSession false/);
        return true;
      },
    );
    await roundTrip(fixture, "after-session-refusal");
  });

  it("rejects a transfer that is not an AMQP message, and the link and broker go on", async () => {
    const connection = await openRhea(fixture.broker.port);
    const sender = connection.open_sender({ target: { address: "sbinbox" } });
    await once(sender, "sendable");
    const outcome = new Promise<EventContext>((resolve) => sender.once("rejected", resolve));
    sender.send(Buffer.from([0x00, 0x53, 0x75, 0xff, 0xff]), undefined, 0);
    const { delivery } = await outcome;
    assert.equal(
      (delivery?.remote_state as { error?: { condition?: string } } | undefined)?.error?.condition,
      "amqp:decode-error",
    );
    connection.close();
    await roundTrip(fixture, "after-bad-message");
  });
});

function once(
  emitter: { once(event: string, listener: (...args: unknown[]) => void): unknown },
  event: string,
): Promise<void> {
  return new Promise((resolve) => emitter.once(event, () => resolve()));
}
