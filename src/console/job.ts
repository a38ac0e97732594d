import type { Archive } from "../servicebus/dead-letter-archive.ts";
import { describeThrottled, throttledSoFar } from "../servicebus/busy.ts";
import { ActFailed } from "../servicebus/dead-letter-act.ts";
import { refusalMessage } from "../servicebus/refusal.ts";
import {
  purgeDeadLetters,
  replayDeadLetters,
  type DeadLetter,
  type DrainResult,
} from "../servicebus/dead-letter.ts";

/** An edit is a replay of one message with a body the operator changed. */
export type Action = "replay" | "purge" | "edit";

/** A planned message: what the operator confirmed, by sequence number. */
export interface Planned {
  readonly sequenceNumber: string;
  readonly messageId: string;
  readonly reason?: string;
}

/**
 * held by another operator: another receiver had it locked; gone: no longer in the dead-letter queue; not reached:
 * still dead-lettered, the run never got to it (stopped, an error ended the run, or its rounds ran out); failed: the
 * act on this message threw (the error ended the run); restored: sent back from an archive (`sbinbox dlq restore`).
 */
export type Result =
  "replayed" | "purged" | "restored" | "held by another operator" | "gone" | "not reached" | "failed";

export interface MessageResult {
  readonly sequenceNumber: string;
  readonly messageId: string;
  readonly result: Result;
  readonly copyMessageId?: string;
  readonly why?: string;
  /** Where the original was archived before it was removed (a purge, an edit-and-retry): file and 1-based line. */
  readonly archived?: { readonly path: string; readonly line: number };
}

export interface Job {
  readonly id: string;
  readonly action: Action;
  readonly operator: string;
  readonly total: number;
  /**
   * partial: some planned messages were held by another operator or gone; stopped: the console was asked to stop
   * (SIGTERM) and finished the message in hand; failed: an error ended the run.
   */
  state: "running" | "done" | "partial" | "stopped" | "failed";
  done: number;
  /** Per result, how many. */
  counts: Partial<Record<Result, number>>;
  results: MessageResult[];
  error?: string;
  /** Where the purged messages were archived first. */
  archive?: string;
  /**
   * What Service Bus throttled (ServerBusy) during the run and the console retried, by operation ("receive 3,
   * send 1"): the console's client's counts over the run, so a second run at the same time adds its own.
   */
  throttled?: string;
}

/** What the audit's "end" event records of a run, the same for the console and `sbinbox dlq`. */
export function endOf(job: Job): Pick<Job, "state" | "counts" | "error"> {
  return { state: job.state, counts: job.counts, ...(job.error === undefined ? {} : { error: job.error }) };
}

export interface RunContext {
  /** The Service Bus client (its type through src/servicebus/: only service.ts names the SDK). */
  readonly client: Parameters<typeof replayDeadLetters>[0];
  readonly entity: string;
  readonly signal: AbortSignal;
  readonly archive?: Archive;
  /** Defer the other dead letters met on the way, for good (the plan asked for it), rather than abandon them. */
  readonly setAside?: boolean;
  /** An edit's new body, by sequence number (validated by the handler's schema when planned). */
  readonly bodies?: ReadonlyMap<string, Buffer>;
  /** Called once per message result, as it is known (the audit's per-message line). */
  readonly onResult?: (result: MessageResult) => void;
}

/** Runs the confirmed plan on exactly its messages; fills in the job as it goes; never throws. */
export async function execute(context: RunContext, planned: readonly Planned[], job: Job): Promise<void> {
  const bySeq = new Map(planned.map((m) => [m.sequenceNumber, m]));
  const record = (result: MessageResult) => {
    job.results.push(result);
    job.counts[result.result] = (job.counts[result.result] ?? 0) + 1;
    context.onResult?.(result);
  };
  const seqs = planned.map((m) => m.sequenceNumber);
  const archivedAt = new Map<string, number>();
  let outcome: DrainResult | undefined;
  const throttledBefore = throttledSoFar(context.client);
  let inHand: string | undefined;
  try {
    outcome = await act(context, job, seqs, archivedAt, (m, copyMessageId) => {
      job.done += 1;
      const line = archivedAt.get(m.sequenceNumber);
      record({
        sequenceNumber: m.sequenceNumber,
        messageId: m.messageId,
        result: job.action === "purge" ? "purged" : "replayed",
        ...(copyMessageId === undefined ? {} : { copyMessageId }),
        ...(line === undefined || !context.archive ? {} : { archived: { path: context.archive.path, line } }),
      });
    });
  } catch (error) {
    // A refusal of the operator's identity names the role the action needs (src/servicebus/refusal.ts).
    job.error = refusalMessage(error, job.action, job.operator) ?? (error as Error).message;
    if (error instanceof ActFailed) inHand = error.sequenceNumber;
  }
  const acted = new Set(job.results.map((r) => r.sequenceNumber));
  for (const seq of seqs) {
    if (acted.has(seq)) continue;
    record({
      sequenceNumber: seq,
      messageId: bySeq.get(seq)!.messageId,
      ...notDone(seq, job, outcome, inHand),
    });
  }
  job.throttled = describeThrottled(throttledBefore, throttledSoFar(context.client));
  job.state = finalState(job, outcome);
}

/** Why a planned message was not acted on, with what to know. */
function notDone(
  seq: string,
  job: Job,
  outcome: DrainResult | undefined,
  inHand: string | undefined,
): { result: Result; why?: string } {
  if (seq === inHand) return { result: "failed", why: job.error! };
  if (outcome === undefined)
    return {
      result: "not reached",
      why: `the run ended on an error first (${job.error}): still dead-lettered`,
    };
  if (outcome.stopped.includes(seq))
    return {
      result: "not reached",
      why: "the run was stopped (SIGTERM or SIGINT) first: still dead-lettered",
    };
  const why = outcome.notActed.get(seq) ?? "not reached";
  if (why === "not reached")
    return { result: why, why: "the run's rounds ended before it came up: still dead-lettered, run again" };
  if (why === "gone")
    return { result: why, why: "no longer in the dead-letter queue: another operator or tool acted on it" };
  return {
    result: why,
    why: "locked by another receiver (another console, CLI or tool): still dead-lettered",
  };
}

function finalState(job: Job, outcome: DrainResult | undefined): Job["state"] {
  if (job.error !== undefined || outcome === undefined) return "failed";
  if (outcome.stopped.length > 0) return "stopped";
  return outcome.notActed.size > 0 ? "partial" : "done";
}

async function act(
  context: RunContext,
  job: Job,
  seqs: string[],
  archivedAt: Map<string, number>,
  onActed: (m: DeadLetter, copyMessageId?: string) => void,
): Promise<DrainResult> {
  const options = { signal: context.signal, setAside: context.setAside === true };
  if (job.action !== "purge")
    return replayDeadLetters(context.client, context.entity, seqs, {
      ...options,
      ...(context.bodies ? { bodyOf: (seq: string) => context.bodies?.get(seq) } : {}),
      // An edit removes the original as a purge does: archived first, with the body sent in its place.
      ...(job.action === "edit" && context.archive
        ? {
            beforeSend: async (message: Parameters<Archive["append"]>[0], info: DeadLetter) => {
              const editedBody = context.bodies?.get(info.sequenceNumber);
              const edit = editedBody ? { editedBody } : undefined;
              archivedAt.set(info.sequenceNumber, await context.archive!.append(message, info, edit));
            },
          }
        : {}),
      onReplayed: (m, copyMessageId) => onActed(m, copyMessageId),
    });
  return purgeDeadLetters(context.client, context.entity, seqs, {
    ...options,
    beforeComplete: async (message, info) => {
      if (context.archive) archivedAt.set(info.sequenceNumber, await context.archive.append(message, info));
    },
    onProgress: (_done, m) => onActed(m),
  });
}
