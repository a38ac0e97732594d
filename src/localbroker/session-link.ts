import { LinkConsumer } from "./consumer.ts";
import type { ManagementResponse } from "./management-response.ts";
import type { Queue } from "./queue.ts";
import { amqp, type Link } from "./rhea.ts";
import type { Session, SessionHolder, Sessions } from "./sessions.ts";

export const SESSION_FILTER = "com.microsoft:session-filter";
const LOCKED_UNTIL = "com.microsoft:locked-until-utc";
const TIMEOUT = "com.microsoft:timeout";
/** Service Bus caps the wait of a next-session attach at about a minute when the client names none. */
const DEFAULT_ACCEPT_WAIT_MS = 60_000;
/** .NET ticks (100 ns since 0001-01-01) at the Unix epoch: the SDKs read locked-until-utc in ticks. */
const EPOCH_TICKS = 621355968000000000n;

const sessionLockLost = (id: string): { condition: string; description: string } => ({
  condition: "com.microsoft:session-lock-lost",
  description: `The session lock has expired on the MessageSession '${id}'. Accept a new MessageSession.`,
});

/** A session operation on a session nobody holds (or whose lock ran out). */
export const sessionLockLostResponse = (id: string): ManagementResponse => ({
  status: 410,
  ...sessionLockLost(id),
});

/** A receive link that holds one session's lock: its messages come from that session only. */
export class SessionLinkConsumer extends LinkConsumer implements SessionHolder {
  private readonly sessions: Sessions;
  sessionId: string | undefined;

  constructor(link: Link, queue: Queue, sessions: Sessions) {
    super(link, queue, link.snd_settle_mode === 1);
    this.sessions = sessions;
  }

  /** A next-session attach not answered yet is open as long as the client keeps its side open. */
  override isClosed(): boolean {
    const link = this.link as unknown as { is_remote_open(): boolean };
    return this.sessionId === undefined ? !link.is_remote_open() : super.isClosed();
  }

  sessionLockLost(): void {
    if (this.link.is_open()) this.link.close(sessionLockLost(this.sessionId ?? ""));
  }

  override close(): void {
    this.sessions.release(this);
    super.close();
  }

  /** The attach reply names the session in the source's filter and its lock's end in the link's properties. */
  answerAttach(session: Session): void {
    this.sessionId = session.id;
    this.link.set_source({ ...(this.link.source ?? {}), filter: { [SESSION_FILTER]: session.id } });
    const ticks = BigInt(session.lockedUntil) * 10_000n + EPOCH_TICKS;
    const bytes = Buffer.alloc(8);
    bytes.writeBigInt64BE(ticks);
    this.link.local.attach["properties"] = { [LOCKED_UNTIL]: amqp.types.wrap_long(bytes) };
  }
}

/**
 * A receive link whose source carries com.microsoft:session-filter. A filter naming a session accepts it at once
 * (refused with session-cannot-be-locked when another receiver holds it); a null filter asks for the next
 * unlocked session with messages, and the attach is answered only when one comes or the client's
 * com.microsoft:timeout (the SDKs send their operation time-out) runs out, with com.microsoft:timeout then.
 */
export function openSessionLink(link: Link, queue: Queue): SessionLinkConsumer | undefined {
  const sessions = queue.sessions;
  const filter = link.source?.["filter"] as Record<string, unknown> | undefined;
  if (!sessions) {
    refuseWithNullSource(link);
    link.close({
      condition: "amqp:not-allowed",
      description: `A sessionful message receiver cannot be created on an entity that does not require sessions: '${queue.name}' has RequiresSession false.`,
    });
    return undefined;
  }
  const consumer = new SessionLinkConsumer(link, queue, sessions);
  const requested = filter?.[SESSION_FILTER];
  if (typeof requested === "string") {
    const session = sessions.acceptById(requested, consumer);
    if (!session) {
      refuseWithNullSource(link);
      link.close({
        condition: "com.microsoft:session-cannot-be-locked",
        description: `The requested session '${requested}' cannot be accepted. It may be locked by another receiver.`,
      });
      return undefined;
    }
    consumer.answerAttach(session);
    return consumer;
  }
  // Held back: rhea opened the link when the attach came; the reply is written when a session is found.
  const state = (link as unknown as { state: { local_open: boolean; open_requests: number } }).state;
  state.local_open = false;
  state.open_requests = 0;
  const raw = (link as unknown as { properties?: Record<string, unknown> }).properties?.[TIMEOUT];
  const waitMs = typeof raw === "number" && raw > 0 ? raw : DEFAULT_ACCEPT_WAIT_MS;
  sessions.acceptNext({
    deadline: sessions.now() + waitMs,
    holder: consumer,
    settle: (session) => {
      const open = link as unknown as { open(): void };
      if (session) {
        consumer.answerAttach(session);
        open.open();
        return;
      }
      refuseWithNullSource(link);
      open.open();
      link.close({
        condition: "com.microsoft:timeout",
        description: `No unlocked session with messages became available on '${queue.name}' within ${waitMs} ms.`,
      });
    },
  });
  return consumer;
}

/**
 * A refused session attach is answered with a null source, as AMQP lets a refusing peer (2.6.3) and as the .NET
 * SDK needs: with the source echoed it reads the reply as a session and fails on its missing parts. The JavaScript
 * SDK reads the detach's error either way.
 */
function refuseWithNullSource(link: Link): void {
  link.local.attach["source"] = null;
}

type Body = Record<string, unknown>;

/**
 * The session operations of `$management`: renew-session-lock, get-session-state, set-session-state. Each needs
 * the session's lock held; undefined for any other operation.
 */
export function sessionOperation(
  queue: Queue,
  operation: unknown,
  body: Body,
): ManagementResponse | undefined {
  if (
    operation !== "com.microsoft:renew-session-lock" &&
    operation !== "com.microsoft:get-session-state" &&
    operation !== "com.microsoft:set-session-state"
  )
    return undefined;
  const sessions = queue.sessions;
  if (!sessions)
    return {
      status: 400,
      condition: "amqp:not-allowed",
      description: `The operation ${operation} needs a session-enabled entity; '${queue.name}' has RequiresSession false.`,
    };
  const id = body["session-id"];
  if (typeof id !== "string")
    return { status: 400, condition: "amqp:invalid-field", description: "session-id is required" };
  const lost = sessionLockLostResponse(id);
  if (operation === "com.microsoft:renew-session-lock") {
    const until = sessions.renew(id);
    return until === undefined ? lost : { status: 200, body: { expiration: new Date(until) } };
  }
  const session = sessions.lockedSession(id);
  if (!session) return lost;
  if (operation === "com.microsoft:get-session-state")
    return { status: 200, body: { "session-state": session.state ?? null } };
  const state = body["session-state"];
  if (state !== null && state !== undefined && !Buffer.isBuffer(state))
    return {
      status: 400,
      condition: "amqp:invalid-field",
      description: "session-state must be binary or null",
    };
  if (Buffer.isBuffer(state) && state.length > queue.settings.maxMessageSizeBytes)
    return {
      status: 400,
      condition: "amqp:invalid-field",
      description: `The session state (${state.length} bytes) exceeds the entity's maximum message size (${queue.settings.maxMessageSizeBytes} bytes).`,
    };
  session.state = state ?? undefined;
  return { status: 200, body: {} };
}
