import type { ServiceBusClient, ServiceBusReceivedMessage, ServiceBusReceiver } from "@azure/service-bus";
import Long from "long";
import { whileBusy } from "./busy.ts";
import { createEntityReceiver } from "./entity-receiver.ts";

/**
 * Why a selected dead letter was not acted on: locked by another receiver (a walk went to the end of the queue, or
 * a lock by number was refused, while a peek still saw it), no longer there, or not reached (the run ended first:
 * its rounds ran out, or it was stopped, or an error ended it).
 */
export type NotActed = "held by another operator" | "gone" | "not reached";

/** The act on one message threw: which message was in hand; the others not yet acted on were not reached. */
export class ActFailed extends Error {
  readonly sequenceNumber: string;
  constructor(sequenceNumber: string, cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.sequenceNumber = sequenceNumber;
  }
}

export interface ActOptions {
  /** Checked before each message: once aborted, the message in hand is finished and nothing more is started. */
  readonly signal?: AbortSignal;
  /** Messages locked and acted on per round trip; small, so a slow act cannot outlast the later ones' locks. */
  readonly chunk?: number;
  /**
   * Defer (set aside) every other dead letter met on the way instead of abandoning it. Irreversible: a deferred
   * message is reached only by receive-by-sequence-number (sbinbox does), never by a plain receive, Service Bus
   * Explorer's receive or purge, or a team's own dead-letter processor. Off by default.
   */
  readonly setAside?: boolean;
}

export type Act = (receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage) => Promise<void>;

export interface ActOutcome {
  /** The sequence numbers acted on, in order. */
  readonly acted: string[];
  /** The others, and why: still in the dead-letter queue but locked by someone else, or no longer there. */
  readonly notActed: Map<string, NotActed>;
  /** Stopped by the signal: these were not reached. */
  readonly stopped: string[];
}

const ROUNDS = 3;
const CHUNK = 20;
/** Messages received at a time while walking the active dead letters: most are set aside at once. */
const WALK = 100;

/**
 * Locks exactly the given dead letters and acts on each. Service Bus receives a message by sequence number only
 * once it is deferred (receive-by-sequence-number; "Throws if the message has not been deferred"), so a dead letter
 * already deferred (by an earlier run with setAside) is locked by its number, and one still active is reached by
 * receiving the dead-letter queue in order. By default every other message met on the way is held locked and
 * abandoned when the walk ends: it stays receivable by anyone, at the cost of one on its delivery count (which
 * triggers nothing in a dead-letter queue). With setAside they are deferred instead, which leaves delivery counts
 * alone but is permanent (only a receive by number reaches them again). A selected message another receiver holds
 * (a second operator) is reported as held, not retried until the run times out.
 */
export async function actOnDeadLetters(
  client: ServiceBusClient,
  queue: string,
  sequenceNumbers: readonly string[],
  act: Act,
  options: ActOptions = {},
): Promise<ActOutcome> {
  const outcome: ActOutcome = { acted: [], notActed: new Map(), stopped: [] };
  const open = () =>
    createEntityReceiver(client, queue, {
      subQueueType: "deadLetter",
      receiveMode: "peekLock",
      skipParsingBodyAsJson: true,
    });
  const receiver = open();
  const wanted = new Set(sequenceNumbers);
  /** Seen in the dead-letter queue by this round's peek, yet not to be had: another receiver holds them. */
  const held = new Set<string>();
  /** Acted on this round, but its lock ran out before the act was settled: the next round does it again. */
  const relock = new Set<string>();
  const chunk = options.chunk ?? CHUNK;
  try {
    for (let round = 0; round < ROUNDS && wanted.size > 0; round++) {
      const before = wanted.size;
      const cut = { byTime: false };
      held.clear();
      relock.clear();
      const states = await peekStates(receiver, [...wanted]);
      for (const seq of wanted)
        if (!states.has(seq)) {
          outcome.notActed.set(seq, "gone");
          wanted.delete(seq);
        }
      const active = [...wanted].filter((s) => states.get(s) === "active");
      const setAside =
        active.length > 0
          ? await walkActive(open, new Set(active), cut, {
              wanted,
              act,
              outcome,
              signal: options.signal,
              setAside: options.setAside === true,
              held,
              relock,
            })
          : new Set();
      const deferred = [...wanted].filter((s) => states.get(s) === "deferred" || setAside.has(s));
      await actBySequenceNumber(
        receiver,
        deferred,
        { wanted, act, outcome, signal: options.signal, held, relock },
        chunk,
      );
      if (options.signal?.aborted) break;
      // No progress ends the rounds, unless a lock was lost mid-act: that one is for the next round to finish.
      if (wanted.size === before && relock.size === 0) break;
      // A walk stopped before its held locks ran out, having acted on some: not a round, the next walk goes on.
      if (cut.byTime && wanted.size < before) round--;
    }
  } finally {
    await receiver.close();
  }
  if (options.signal?.aborted) outcome.stopped.push(...wanted);
  else
    for (const seq of wanted)
      if (!outcome.notActed.has(seq))
        outcome.notActed.set(seq, held.has(seq) ? "held by another operator" : "not reached");
  for (const seq of outcome.stopped) outcome.notActed.delete(seq);
  return outcome;
}

/** Each number's state in the dead-letter queue (active or deferred); a number not there is left out. */
async function peekStates(
  receiver: ServiceBusReceiver,
  sequenceNumbers: string[],
): Promise<Map<string, string>> {
  const states = new Map<string, string>();
  if (sequenceNumbers.length === 0) return states;
  const wanted = new Set(sequenceNumbers);
  const sorted = sequenceNumbers.map((s) => Long.fromString(s)).sort((a, b) => a.compare(b));
  const last = sorted[sorted.length - 1]!;
  let from = sorted[0]!;
  let next = 0;
  while (!from.greaterThan(last)) {
    const page = await whileBusy(receiver, "receive", () =>
      receiver.peekMessages(100, { fromSequenceNumber: from }),
    );
    if (page.length === 0) break;
    for (const m of page) {
      const seq = String(m.sequenceNumber);
      if (wanted.has(seq)) states.set(seq, m.state);
    }
    from = Long.fromValue(page[page.length - 1]!.sequenceNumber!).add(1);
    // Skip the gap to the next wanted number rather than peek through messages nobody selected.
    while (next < sorted.length && sorted[next]!.lessThan(from)) next++;
    if (next === sorted.length) break;
    from = sorted[next]!;
  }
  return states;
}

/** Deferred dead letters, locked by number a chunk at a time; a chunk that cannot be locked whole is tried one by one. */
async function actBySequenceNumber(
  receiver: ServiceBusReceiver,
  sequenceNumbers: string[],
  run: Run,
  chunk: number,
): Promise<void> {
  for (let i = 0; i < sequenceNumbers.length && !run.signal?.aborted; i += chunk) {
    const part = sequenceNumbers.slice(i, i + chunk);
    let locked = await lockDeferred(receiver, part);
    if (locked === undefined) {
      locked = [];
      for (const seq of part) {
        const one = await lockDeferred(receiver, [seq]);
        if (one !== undefined) locked.push(...one);
        else if (await stillThere(receiver, seq)) run.held.add(seq);
        else {
          // Completed by someone else between the peek and the lock: gone, not held.
          run.outcome.notActed.set(seq, "gone");
          run.wanted.delete(seq);
        }
      }
    }
    await actOnLocked(receiver, locked, run);
  }
}

/** Whether a peek still sees the dead letter of this number. */
async function stillThere(receiver: ServiceBusReceiver, sequenceNumber: string): Promise<boolean> {
  const [first] = await receiver.peekMessages(1, { fromSequenceNumber: Long.fromString(sequenceNumber) });
  return first !== undefined && String(first.sequenceNumber) === sequenceNumber;
}

/** The deferred messages by number, locked; undefined when one of them cannot be (locked elsewhere, or gone). */
async function lockDeferred(
  receiver: ServiceBusReceiver,
  sequenceNumbers: string[],
): Promise<ServiceBusReceivedMessage[] | undefined> {
  try {
    return await whileBusy(receiver, "receive", () =>
      receiver.receiveDeferredMessages(sequenceNumbers.map((s) => Long.fromString(s))),
    );
  } catch (error) {
    if ((error as { code?: string }).code === "MessageNotFound") return undefined;
    throw error;
  }
}

interface Run {
  readonly wanted: Set<string>;
  readonly act: Act;
  readonly outcome: ActOutcome;
  readonly signal: AbortSignal | undefined;
  /** Defer the messages met on the way (ActOptions.setAside) rather than abandon them. */
  readonly setAside?: boolean;
  /** Filled with the selected ones found held by another receiver. */
  readonly held: Set<string>;
  /** Filled with the ones whose lock ran out mid-act. */
  readonly relock: Set<string>;
}

/**
 * How many deliveries one receiver takes while walking before the walk goes on with a new one. A receiver is one
 * AMQP session, and the SDK's (rhea's) session keeps its incoming deliveries in a buffer of 2,048
 * (DEFAULT_BUFFER_SIZE, node_modules/rhea/lib/session.js) that frees slots only from its oldest end: a slot is
 * freed once its delivery and every one before it are settled. So the limit is 2,048 deliveries counted from the
 * oldest unsettled one, and a message acted on and completed after a held one still takes a slot. Its incoming
 * window is what is left: at 0 Service Bus sends nothing more and a receive comes back empty, which a walk would
 * read as the end of the queue. So every delivery counts here (held, acted on, set aside), not only the held ones.
 */
export const DELIVERIES_PER_RECEIVER = 1_900;
/** A receive that outlasts its wait by this much is given up (azure-sdk-for-js#11633: one near the window hung). */
const RECEIVE_GRACE_MS = 10_000;
const RECEIVE_WAIT_MS = 1_000;

interface Hold {
  readonly receiver: ServiceBusReceiver;
  /** Locked and not acted on: abandoned when the walk ends. */
  readonly messages: ServiceBusReceivedMessage[];
  /** Every delivery this receiver took, settled or not: what its session's buffer counts. */
  taken: number;
}

/**
 * Receives the dead-letter queue in order until every selected active message has come up, acting on each selected
 * one as it comes up. The others are held locked and abandoned when the walk ends, or with setAside deferred at
 * once (before a lock could run out, which would count as a delivery), selected ones included, which are then
 * locked by number a few at a time, each with a fresh lock, however long the run. A receiver that has taken
 * DELIVERIES_PER_RECEIVER is kept (its locks with it) and the walk goes on with another, so a walk reaches past any
 * number of messages it must hold. The walk stops half way to its first held lock's expiry (cut.byTime), so no
 * held lock runs out (which would raise a delivery count on its own and bring the message round again): the caller
 * walks again for the rest.
 * A message with a session id is never deferred: receiving a deferred message by number from the dead-letter queue
 * of a session-enabled entity has been reported to fail (SessionLockLost, Azure/azure-sdk-for-net#34662), which
 * would strand it. Returns the sequence numbers deferred.
 */
async function walkActive(
  open: () => ServiceBusReceiver,
  active: Set<string>,
  cut: { byTime: boolean },
  walk: Run & { readonly setAside: boolean },
): Promise<Set<string>> {
  const deferred = new Set<string>();
  const holds: Hold[] = [{ receiver: open(), messages: [], taken: 0 }];
  const seen = new Set<string>();
  let stopAt = Infinity;
  let emptyOnce = false;
  try {
    while (active.size > 0 && !walk.signal?.aborted) {
      if (Date.now() >= stopAt) {
        cut.byTime = true;
        break;
      }
      if (holds[holds.length - 1]!.taken + WALK > DELIVERIES_PER_RECEIVER)
        holds.push({ receiver: open(), messages: [], taken: 0 });
      const hold = holds[holds.length - 1]!;
      const receiver = hold.receiver;
      const batch = await receiveBounded(receiver);
      if (batch === undefined) break; // hung: says nothing of the ones not reached
      // One empty receive is asked again: a throttled receive link gets its messages late or not in this wait
      // (Service Bus holds its deliveries back), which would end the walk with the selected ones not reached.
      if (batch.length === 0 && !emptyOnce) {
        emptyOnce = true;
        continue;
      }
      if (batch.length > 0) emptyOnce = false;
      hold.taken += batch.length;
      // A message seen twice: a held one's lock ran out and it came back; this walk has seen the queue through.
      if (batch.length === 0 || batch.some((m) => seen.has(String(m.sequenceNumber)))) {
        hold.messages.push(...batch);
        // An empty receive on a receiver with room to take more: the walk reached the end, so a selected one still
        // active that never came up is locked by someone else. A lock that ran out says nothing of the ones not
        // reached, nor does an empty receive on a full receiver (the swap above keeps that from happening).
        if (batch.length === 0 && hold.taken + WALK <= DELIVERIES_PER_RECEIVER)
          for (const seq of active) walk.held.add(seq);
        break;
      }
      const setAside = walk.setAside ? batch.filter((m) => m.sessionId === undefined) : [];
      await Promise.all(setAside.map((m) => receiver.deferMessage(m)));
      for (const m of batch) {
        seen.add(String(m.sequenceNumber));
        active.delete(String(m.sequenceNumber));
      }
      for (const m of setAside) deferred.add(String(m.sequenceNumber));
      const locked = batch.filter((m) => !setAside.includes(m));
      const selected = locked.filter((m) => walk.wanted.has(String(m.sequenceNumber)));
      const kept = locked.filter((m) => !selected.includes(m));
      if (kept.length > 0 && stopAt === Infinity) stopAt = halfWayToExpiry(kept[0]!);
      hold.messages.push(...kept);
      await actOnLocked(receiver, selected, walk);
    }
  } finally {
    for (const { receiver, messages } of holds) {
      for (const m of messages) await receiver.abandonMessage(m).catch(() => undefined);
      await receiver.close().catch(() => undefined);
    }
  }
  return deferred;
}

/**
 * A receive of up to WALK messages, retried while throttled (busy.ts); undefined if one try outlasts its wait by
 * RECEIVE_GRACE_MS.
 */
async function receiveBounded(
  receiver: ServiceBusReceiver,
): Promise<ServiceBusReceivedMessage[] | undefined> {
  try {
    return await whileBusy(receiver, "receive", (abortSignal) =>
      receiver.receiveMessages(WALK, {
        maxWaitTimeInMs: RECEIVE_WAIT_MS,
        abortSignal: AbortSignal.any([abortSignal, AbortSignal.timeout(RECEIVE_WAIT_MS + RECEIVE_GRACE_MS)]),
      }),
    );
  } catch (error) {
    if ((error as { name?: string }).name === "AbortError") return undefined;
    throw error;
  }
}

/** Half the time left on a just-received message's lock, as a time on this machine's clock. */
function halfWayToExpiry(message: ServiceBusReceivedMessage): number {
  const now = Date.now();
  const left = (message.lockedUntilUtc?.getTime() ?? now) - now;
  return now + Math.max(0, left) / 2;
}

/** A locked message not acted on goes back as it came: deferred if it was, else abandoned (never deferred anew). */
async function putBack(receiver: ServiceBusReceiver, message: ServiceBusReceivedMessage): Promise<void> {
  if (message.state === "deferred") await receiver.deferMessage(message).catch(() => undefined);
  else await receiver.abandonMessage(message).catch(() => undefined);
}

async function actOnLocked(
  receiver: ServiceBusReceiver,
  locked: ServiceBusReceivedMessage[],
  run: Run,
): Promise<void> {
  const { wanted, act, outcome, signal } = run;
  for (const message of locked) {
    const seq = String(message.sequenceNumber);
    if (signal?.aborted) {
      // Not started: put back at once rather than left to a lock expiry.
      await putBack(receiver, message);
      continue;
    }
    try {
      await act(receiver, message);
    } catch (error) {
      // Its lock ran out mid-act (a replay's copy may be sent: the next round sends it again under the same
      // MessageId, which duplicate detection drops, and the inbox key stops it either way): left for the next round.
      if ((error as { code?: string }).code === "MessageLockLost") {
        run.relock.add(seq);
        continue;
      }
      await putBack(receiver, message);
      throw new ActFailed(seq, error);
    }
    wanted.delete(seq);
    outcome.acted.push(seq);
  }
}
