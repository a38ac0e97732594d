import { randomUUID } from "node:crypto";
import type { ServiceBusClient } from "@azure/service-bus";
import type { OutboxStatus } from "../outbox/store.ts";
import {
  peekAll,
  peekDeadLetter,
  peekDeadLetters,
  purgeDeadLetters,
  replayDeadLetters,
  stillDeadLettered,
  type DeadLetter,
} from "../servicebus/dead-letter.ts";
import { selectorOf, type Selection } from "../servicebus/dead-letter-select.ts";
import { createEntityReceiver } from "../servicebus/entity-receiver.ts";

/** What the console reads besides Service Bus; both optional (no database configured). */
export interface ConsoleSources {
  readonly client: ServiceBusClient;
  /** The queue, or topic/Subscriptions/subscription. */
  readonly entity: string;
  readonly openClaims?: () => Promise<number>;
  readonly outboxStatus?: () => Promise<OutboxStatus>;
}

export type Action = "replay" | "purge";

export interface ConsoleState {
  readonly entity: string;
  /** Counted by peeking (Data Receiver is enough; the management API would need Manage): capped at COUNT_CAP. */
  readonly active: number;
  /** Scheduled messages (retry copies waiting for their time), counted apart from the active ones. */
  readonly scheduled: number;
  readonly deadLettered: number;
  readonly capped: boolean;
  readonly groups: { reason: string; messages: DeadLetter[] }[];
  readonly inbox?: { openClaims: number } | { error: string };
  readonly outbox?: OutboxStatus | { error: string };
}

export interface Plan {
  readonly token: string;
  readonly action: Action;
  readonly messages: { sequenceNumber: string; messageId: string; reason?: string }[];
  /** The peek stopped at COUNT_CAP: these are the first found, more may match. */
  readonly capped: boolean;
}

export type MessageResult =
  | { sequenceNumber: string; messageId: string; result: "replayed"; copyMessageId: string }
  | { sequenceNumber: string; messageId: string; result: "purged" }
  | { sequenceNumber: string; messageId: string; result: "not done"; why: string };

export interface Job {
  readonly id: string;
  readonly action: Action;
  readonly total: number;
  /** partial: the run ended with planned messages still dead-lettered (their locks ran out meanwhile): run again. */
  state: "running" | "done" | "partial" | "failed";
  done: number;
  results: MessageResult[];
  error?: string;
}

export const COUNT_CAP = 5_000;
/** A plan not confirmed within this is void: the queue may have changed under the operator's eyes. */
const PLAN_TTL_MS = 5 * 60_000;
const NO_REASON = "(no reason)";

export interface ConsoleService {
  state(): Promise<ConsoleState>;
  body(sequenceNumber: string): Promise<string | undefined>;
  /** What a write would touch, and the one-time token that confirms exactly that. */
  plan(action: Action, selection: Selection): Promise<Plan>;
  /** Starts the confirmed plan; throws when the token is unknown, used or expired, or a job runs. */
  run(token: string): Job;
  job(id: string): Job | undefined;
}

export function createConsoleService(sources: ConsoleSources, now: () => number = Date.now): ConsoleService {
  const plans = new Map<string, Plan & { expires: number }>();
  const jobs = new Map<string, Job>();
  let running: Job | undefined;

  // A peek also returns scheduled and deferred messages: only the active ones wait for a receiver.
  const countActive = async (): Promise<{ active: number; scheduled: number; peeked: number }> => {
    const receiver = createEntityReceiver(sources.client, sources.entity, { skipParsingBodyAsJson: true });
    const n = { active: 0, scheduled: 0, peeked: 0 };
    try {
      for await (const m of peekAll(receiver, COUNT_CAP)) {
        n.peeked++;
        if (m.state === "active") n.active++;
        else if (m.state === "scheduled") n.scheduled++;
      }
      return n;
    } finally {
      await receiver.close();
    }
  };

  const guard = async <T>(
    read: (() => Promise<T>) | undefined,
  ): Promise<T | { error: string } | undefined> => {
    if (!read) return undefined;
    try {
      return await read();
    } catch (error) {
      return { error: (error as Error).message };
    }
  };

  return {
    async state() {
      const [counts, dead, openClaims, outbox] = await Promise.all([
        countActive(),
        peekDeadLetters(sources.client, sources.entity, { max: COUNT_CAP }),
        guard(sources.openClaims),
        guard(sources.outboxStatus),
      ]);
      const groups = new Map<string, DeadLetter[]>();
      for (const m of dead) {
        const reason = m.reason ?? NO_REASON;
        groups.set(reason, [...(groups.get(reason) ?? []), m]);
      }
      return {
        entity: sources.entity,
        active: counts.active,
        scheduled: counts.scheduled,
        deadLettered: dead.length,
        capped: counts.peeked >= COUNT_CAP || dead.length >= COUNT_CAP,
        groups: [...groups].map(([reason, messages]) => ({ reason, messages })),
        inbox: typeof openClaims === "number" ? { openClaims } : openClaims,
        outbox,
      };
    },

    async body(sequenceNumber) {
      return (await peekDeadLetter(sources.client, sources.entity, sequenceNumber))?.body;
    },

    async plan(action, selection) {
      const select = selectorOf(
        selection.reason === NO_REASON ? { ...selection, reason: undefined, all: true } : selection,
      );
      const peeked = await peekDeadLetters(sources.client, sources.entity, { max: COUNT_CAP });
      const matching = peeked.filter(
        (m) => select(m) && (selection.reason !== NO_REASON || m.reason === undefined),
      );
      if (matching.length === 0) throw new Error("no dead-lettered message matches");
      for (const [token, p] of plans) if (p.expires < now()) plans.delete(token);
      const plan: Plan = {
        token: randomUUID(),
        action,
        capped: peeked.length >= COUNT_CAP,
        messages: matching.map((m) => ({
          sequenceNumber: m.sequenceNumber,
          messageId: m.messageId,
          ...(m.reason === undefined ? {} : { reason: m.reason }),
        })),
      };
      plans.set(plan.token, { ...plan, expires: now() + PLAN_TTL_MS });
      return plan;
    },

    run(token) {
      const plan = plans.get(token);
      if (!plan || plan.expires < now())
        throw new Error("this confirmation is unknown or expired: ask again");
      if (running) throw new Error("another replay or purge is running");
      plans.delete(token);
      const job: Job = {
        id: randomUUID(),
        action: plan.action,
        total: plan.messages.length,
        state: "running",
        done: 0,
        results: [],
      };
      jobs.set(job.id, job);
      running = job;
      void execute(sources, plan, job).finally(() => {
        running = undefined;
      });
      return job;
    },

    job: (id) => jobs.get(id),
  };
}

/** The confirmed messages exactly, by sequence number, through the same functions as `sbinbox dlq`. */
async function execute(sources: ConsoleSources, plan: Plan, job: Job): Promise<void> {
  const select = selectorOf({ sequenceNumbers: plan.messages.map((m) => m.sequenceNumber) });
  const acted = new Set<string>();
  // The state changes once, at the very end: a poll during the check of what is left must not see "done" for a
  // run that then turns out partial.
  let failed = false;
  const options = {
    onProgress: (done: number, m: DeadLetter) => {
      job.done = done;
      acted.add(m.sequenceNumber);
      job.results.push(
        plan.action === "purge"
          ? { sequenceNumber: m.sequenceNumber, messageId: m.messageId, result: "purged" }
          : // The copy's MessageId is known when the replay returns; one that fails later keeps this entry.
            {
              sequenceNumber: m.sequenceNumber,
              messageId: m.messageId,
              result: "replayed",
              copyMessageId: "",
            },
      );
    },
  };
  try {
    if (plan.action === "replay") {
      const { replayed } = await replayDeadLetters(sources.client, sources.entity, select, options);
      // Both lists are in the order the messages were acted on.
      replayed.forEach((r, i) => {
        const entry = job.results[i];
        if (entry?.result === "replayed") entry.copyMessageId = r.copyMessageId;
      });
    } else {
      await purgeDeadLetters(sources.client, sources.entity, select, options);
    }
  } catch (error) {
    job.error = (error as Error).message;
    failed = true;
  }
  const missed = plan.messages.filter((m) => !acted.has(m.sequenceNumber));
  let left = new Set<string>();
  if (missed.length > 0) {
    try {
      left = await stillDeadLettered(
        sources.client,
        sources.entity,
        missed.map((m) => m.sequenceNumber),
      );
    } catch (error) {
      job.error ??= `could not check what is left: ${(error as Error).message}`;
      failed = true;
    }
  }
  for (const m of missed)
    job.results.push({
      ...m,
      result: "not done",
      why: left.has(m.sequenceNumber)
        ? "still dead-lettered: run again"
        : (job.error ?? "no longer in the dead-letter queue (replayed or purged meanwhile)"),
    });
  job.state = failed ? "failed" : left.size > 0 ? "partial" : "done";
}
