import { createHash, randomUUID } from "node:crypto";
import type { ServiceBusClient } from "@azure/service-bus";
import type { OutboxStatus } from "../outbox/store.ts";
import type { Archive } from "../servicebus/dead-letter-archive.ts";
import {
  peekAll,
  peekDeadLetter,
  peekDeadLetters,
  setAsideWarning,
  type DeadLetter,
  type SetAside,
} from "../servicebus/dead-letter.ts";
import { createEntityReceiver } from "../servicebus/entity-receiver.ts";
import {
  indexOf,
  matcher,
  NO_REASON,
  pageOf,
  tally,
  type DeadLetterIndex,
  type Filter,
  type Page,
  type Tally,
} from "./dead-letter-index.ts";
import { maskBody } from "./mask.ts";
import { endOf, execute, type Action, type Job, type MessageResult, type Planned } from "./job.ts";

export type { Action, Job, MessageResult } from "./job.ts";
export type { Filter } from "./dead-letter-index.ts";

/** What an audit record is of: the console's actions, and `sbinbox dlq restore` (from an archive). */
export type AuditAction = Action | "restore";

/** One audit record: a plan, a run's start, a message's result, a run's end. */
export type AuditEvent =
  | {
      event: "plan";
      operator: string;
      action: AuditAction;
      entity: string;
      count: number;
      messages: readonly Planned[];
      /** An edit: the bodies' SHA-256 before and after (the bodies themselves may hold personal data). */
      edit?: { sha256Before: string; sha256After: string };
      /** Asked to set the others aside: how many other dead letters it would defer for good. */
      setAside?: number;
    }
  | {
      event: "run";
      operator: string;
      action: AuditAction;
      entity: string;
      job: string;
      count: number;
      archive?: string;
    }
  | ({ event: "result"; operator: string; action: AuditAction; entity: string; job: string } & MessageResult)
  | {
      event: "end";
      operator: string;
      action: AuditAction;
      entity: string;
      job: string;
      state: Job["state"];
      counts: Job["counts"];
      error?: string;
    };

/** What the console reads besides Service Bus; both optional (no database configured). */
export interface ConsoleSources {
  readonly client: ServiceBusClient;
  /** The queue, or topic/Subscriptions/subscription. */
  readonly entity: string;
  readonly openClaims?: () => Promise<number>;
  readonly outboxStatus?: () => Promise<OutboxStatus>;
  /** Where every plan, run and result is recorded (a log line, a telemetry event). */
  readonly audit?: (event: AuditEvent) => void;
  /**
   * Checks an edited body against the handler's schema for the message's type: undefined when it passes, else what
   * is wrong. Without it (no handler module loaded) an edit is refused.
   */
  readonly validate?: (type: string | undefined, body: unknown) => string | undefined;
  /** The body fields the handler for a type marks personal: masked in every body the console shows. */
  readonly personalFields?: (type: string | undefined) => readonly string[] | undefined;
  /** Started with --show-personal: bodies may be read unmasked (and only then edited where they have personal fields). */
  readonly showPersonal?: boolean;
  /** Where a purge writes each message before removing it; a purge is refused without one. */
  readonly archive?: (operator: string) => Archive;
  /** Started with --set-aside: a plan may ask to defer the other dead letters met on the way (irreversible). */
  readonly setAsideAllowed?: boolean;
}

export interface ConsoleState {
  readonly entity: string;
  /** The entity's own messages, peeked up to QUEUE_COUNT_CAP (Data Receiver is enough; runtime counts need Manage). */
  readonly queue: {
    readonly active: number;
    readonly scheduled: number;
    readonly peeked: number;
    readonly capped: boolean;
  };
  /** Every dead letter, counted by a full peek: exact, never capped. */
  readonly deadLettered: number;
  readonly reasons: readonly Tally[];
  readonly types: readonly Tally[];
  readonly indexedAt: string;
  /** Whether bodies may be shown unmasked (the console was started with --show-personal). */
  readonly showPersonal: boolean;
  /** Whether a plan may set the other dead letters aside (the console was started with --set-aside). */
  readonly setAsideAllowed: boolean;
  readonly inbox?: { openClaims: number } | { error: string };
  readonly outbox?: OutboxStatus | { error: string };
}

/** Exactly these messages, or every message matching a filter (a selection across pages, or "all matching"). */
export type Selection = { readonly sequenceNumbers: readonly string[] } | { readonly filter: Filter };

export interface Plan {
  readonly token: string;
  readonly action: Action;
  readonly count: number;
  /** The first few, for the confirmation to name; the plan holds them all. */
  readonly sample: readonly Planned[];
  readonly reasons: readonly Tally[];
  /** Asked for: the other dead letters this run would defer for good, and the sentence the confirmation shows. */
  readonly setAside?: SetAside;
}

export const QUEUE_COUNT_CAP = 5_000;
/** A plan not confirmed within this is void: the queue may have changed under the operator's eyes. */
const PLAN_TTL_MS = 5 * 60_000;
/** A page read this long after the last full peek is served from it while a new one is taken behind it. */
const INDEX_TTL_MS = 10_000;
const SAMPLE = 20;
/** How far a cold console peeks directly for an unfiltered page, rather than wait for the index. */
const FIRST_PAGES = 500;

export interface ConsoleService {
  state(options?: { fresh?: boolean }): Promise<ConsoleState>;
  /** One page of the dead letters matching the filter, from the last full peek. */
  messages(filter: Filter, offset: number, limit: number): Promise<Page>;
  /** One dead letter with its body, personal fields masked unless `unmasked` (refused without showPersonal). */
  body(sequenceNumber: string, unmasked?: boolean): Promise<(DeadLetter & { masked: boolean }) | undefined>;
  /** What a write would touch (a fresh full peek), and the one-time token that confirms exactly that. */
  plan(
    action: Action,
    selection: Selection,
    operator: string,
    options?: { setAside?: boolean },
  ): Promise<Plan>;
  /** Edit-and-retry of one dead letter: the new body validated by the handler's schema, planned like a replay. */
  planEdit(sequenceNumber: string, body: string, operator: string): Promise<Plan>;
  /** Starts the confirmed plan; throws when the token is unknown, used, expired or another's, or a job runs. */
  run(token: string, operator: string): Job;
  job(id: string): Job | undefined;
  /** The running job, if any. */
  running(): Job | undefined;
  /** Stops the running job after the message in hand; resolves with it once it has ended (undefined: none ran). */
  stop(): Promise<Job | undefined>;
}

export function createConsoleService(sources: ConsoleSources, now: () => number = Date.now): ConsoleService {
  const plans = new Map<
    string,
    {
      plan: Plan;
      messages: Planned[];
      operator: string;
      expires: number;
      bodies?: Map<string, Buffer>;
      setAside?: boolean;
    }
  >();
  const jobs = new Map<string, Job>();
  let running: { job: Job; stop: AbortController; ended: Promise<void> } | undefined;
  const audit = (event: AuditEvent) => sources.audit?.(event);
  const index = createIndexCache(sources, now);

  return {
    async state(options = {}) {
      const [queue, dead, openClaims, outbox] = await Promise.all([
        countQueue(sources),
        index.get(options.fresh === true),
        guard(sources.openClaims),
        guard(sources.outboxStatus),
      ]);
      return {
        entity: sources.entity,
        queue,
        deadLettered: dead.messages.length,
        reasons: dead.reasons,
        types: dead.types,
        indexedAt: dead.at.toISOString(),
        showPersonal: sources.showPersonal === true,
        setAsideAllowed: sources.setAsideAllowed === true,
        inbox: typeof openClaims === "number" ? { openClaims } : openClaims,
        outbox,
      };
    },

    async messages(filter, offset, limit) {
      // A cold console's first page need not wait for a count of the whole queue: it is peeked on its own, and
      // the count (the index) is built behind it; the page says the total is still being counted.
      if (!index.kept() && Object.keys(filter).length === 0 && offset + limit <= FIRST_PAGES) {
        void index.get(false).catch(() => undefined);
        const first = await peekDeadLetters(sources.client, sources.entity, { max: offset + limit });
        return { total: undefined, offset, messages: first.slice(offset) };
      }
      return pageOf(await index.get(false), filter, offset, limit);
    },

    async body(sequenceNumber, unmasked = false) {
      if (unmasked && sources.showPersonal !== true)
        throw new PersonalDataRefused(
          "this console shows personal fields masked (start it with --show-personal)",
        );
      const found = await peekDeadLetter(sources.client, sources.entity, sequenceNumber);
      if (!found) return undefined;
      if (unmasked) return { ...found, masked: false };
      const { body, masked } = maskBody(found.body ?? "", sources.personalFields?.(found.type));
      return { ...found, body, masked };
    },

    async plan(action, selection, operator, options = {}) {
      if (action === "purge" && !sources.archive)
        throw new Error("a purge needs an archive to write to first");
      if (options.setAside === true && sources.setAsideAllowed !== true)
        throw new Error(
          "setting other dead letters aside (deferring them for good) needs a console started with --set-aside",
        );
      const all = await index.get(true);
      const messages = planned(all, selection);
      if (messages.length === 0) throw new Error("no dead-lettered message matches");
      const setAside =
        options.setAside === true
          ? setAsideWarning(all.messages, new Set(messages.map((m) => m.sequenceNumber)))
          : undefined;
      return remember(action, messages, operator, undefined, undefined, setAside);
    },

    async planEdit(sequenceNumber, body, operator) {
      const original = await peekDeadLetter(sources.client, sources.entity, sequenceNumber);
      if (!original) throw new Error("no dead-lettered message has this sequence number");
      if (sources.personalFields?.(original.type)?.length && sources.showPersonal !== true)
        throw new PersonalDataRefused(
          "its type has personal fields, which this console masks: edit-and-retry needs --show-personal",
        );
      if (!sources.archive)
        throw new Error("an edit-and-retry needs an archive to write the original to first");
      const problem = checkEdit(sources, original, body);
      if (problem !== undefined) throw new Error(problem);
      const edit = { sha256Before: sha256(original.body ?? ""), sha256After: sha256(body) };
      const messages = [
        {
          sequenceNumber,
          messageId: original.messageId,
          ...(original.reason ? { reason: original.reason } : {}),
        },
      ];
      return remember("edit", messages, operator, new Map([[sequenceNumber, Buffer.from(body)]]), edit);
    },

    run(token, operator) {
      const entry = plans.get(token);
      if (!entry || entry.expires < now())
        throw new Error("this confirmation is unknown or expired: ask again");
      if (entry.operator !== operator) throw new Error("this confirmation is another operator's");
      if (running) throw new Error(`another ${running.job.action} is running (${running.job.operator}'s)`);
      // Spent only once the run has started: a run whose audit line cannot be written can be asked for again.
      const job = startJob(
        entry.plan.action,
        entry.messages,
        operator,
        entry.bodies,
        entry.setAside === true,
      );
      plans.delete(token);
      return job;
    },

    job: (id) => jobs.get(id),
    running: () => running?.job,

    async stop() {
      if (!running) return undefined;
      const { job, stop, ended } = running;
      stop.abort();
      await ended;
      return job;
    },
  };

  function remember(
    action: Action,
    messages: Planned[],
    operator: string,
    bodies?: Map<string, Buffer>,
    edit?: { sha256Before: string; sha256After: string },
    setAside?: SetAside,
  ): Plan {
    for (const [token, p] of plans) if (p.expires < now()) plans.delete(token);
    const plan: Plan = {
      token: randomUUID(),
      action,
      count: messages.length,
      sample: messages.slice(0, SAMPLE),
      reasons: tally(messages, (m) => m.reason ?? NO_REASON),
      ...(setAside ? { setAside } : {}),
    };
    plans.set(plan.token, {
      plan,
      messages,
      operator,
      expires: now() + PLAN_TTL_MS,
      ...(bodies ? { bodies } : {}),
      ...(setAside ? { setAside: true } : {}),
    });
    audit({
      event: "plan",
      operator,
      action,
      entity: sources.entity,
      count: messages.length,
      messages,
      ...(edit ? { edit } : {}),
      ...(setAside ? { setAside: setAside.count } : {}),
    });
    return plan;
  }

  function startJob(
    action: Action,
    messages: Planned[],
    operator: string,
    bodies?: Map<string, Buffer>,
    setAside = false,
  ): Job {
    const archive = action === "purge" || action === "edit" ? sources.archive!(operator) : undefined;
    const job: Job = {
      id: randomUUID(),
      action,
      operator,
      total: messages.length,
      state: "running",
      done: 0,
      counts: {},
      results: [],
      ...(archive ? { archive: archive.path } : {}),
    };
    const base = { operator, action, entity: sources.entity, job: job.id };
    // Recorded before it exists: a run whose line cannot be written (a full audit disk) is refused, never shown.
    audit({ event: "run", ...base, count: messages.length, ...(archive ? { archive: archive.path } : {}) });
    jobs.set(job.id, job);
    const stop = new AbortController();
    const context = {
      client: sources.client,
      entity: sources.entity,
      signal: stop.signal,
      archive,
      setAside,
      ...(bodies ? { bodies } : {}),
      onResult: (r: MessageResult) => audit({ event: "result", ...base, ...r }),
    };
    const ended = execute(context, messages, job).finally(() => {
      running = undefined;
      index.invalidate();
      audit({ event: "end", ...base, ...endOf(job) });
    });
    running = { job, stop, ended };
    return job;
  }
}

/** A read or an edit of personal data this console was not started to allow. */
export class PersonalDataRefused extends Error {}

/** Why an edited body cannot be sent (not JSON, or not what the handler's schema for its type accepts), if so. */
function checkEdit(sources: ConsoleSources, original: DeadLetter, body: string): string | undefined {
  if (!sources.validate)
    return "edit-and-retry needs the handler module (SBINBOX_HANDLERS) to check the body against";
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (error) {
    return `the edited body is not JSON: ${(error as Error).message}`;
  }
  return sources.validate(original.type, parsed);
}

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

/** The selection resolved against a full peek: the confirmed messages exactly, oldest first. */
function planned(index: DeadLetterIndex, selection: Selection): Planned[] {
  const match =
    "filter" in selection
      ? matcher(selection.filter)
      : (
          (wanted: Set<string>) => (m: DeadLetter) =>
            wanted.has(m.sequenceNumber)
        )(new Set(selection.sequenceNumbers));
  return index.messages.filter(match).map((m) => ({
    sequenceNumber: m.sequenceNumber,
    messageId: m.messageId,
    ...(m.reason === undefined ? {} : { reason: m.reason }),
  }));
}

/**
 * The last full peek of the dead-letter queue, shared by the reads that come while one is under way. A read past
 * INDEX_TTL_MS gets the kept index at once and starts a new peek behind it (so a page never waits for a count of a
 * large queue twice); a forced read (a refresh, a plan) waits for a new one.
 */
function createIndexCache(sources: ConsoleSources, now: () => number) {
  let last: DeadLetterIndex | undefined;
  let building: Promise<DeadLetterIndex> | undefined;
  let builtAt = 0;
  const build = (): Promise<DeadLetterIndex> => {
    if (building) return building;
    const at = now();
    const next = peekDeadLetters(sources.client, sources.entity).then((all) => indexOf(all, new Date(at)));
    building = next;
    next.then(
      (index) => {
        last = index;
        builtAt = at;
      },
      // A failed peek is not kept: the next read tries again.
      () => undefined,
    );
    void next
      .finally(() => {
        if (building === next) building = undefined;
      })
      .catch(() => undefined);
    return next;
  };
  return {
    get(fresh: boolean): Promise<DeadLetterIndex> {
      if (fresh || !last) return build();
      if (now() - builtAt >= INDEX_TTL_MS) void build().catch(() => undefined);
      return Promise.resolve(last);
    },
    /** The kept index, if there is one: no peek started. */
    kept: () => last,
    invalidate() {
      last = undefined;
    },
  };
}

/** A peek also returns scheduled and deferred messages: only the active ones wait for a receiver. */
async function countQueue(sources: ConsoleSources): Promise<ConsoleState["queue"]> {
  const receiver = createEntityReceiver(sources.client, sources.entity, { skipParsingBodyAsJson: true });
  const n = { active: 0, scheduled: 0, peeked: 0 };
  try {
    for await (const m of peekAll(receiver, QUEUE_COUNT_CAP)) {
      n.peeked++;
      if (m.state === "active") n.active++;
      else if (m.state === "scheduled") n.scheduled++;
    }
    return { ...n, capped: n.peeked >= QUEUE_COUNT_CAP };
  } finally {
    await receiver.close();
  }
}

async function guard<T>(read: (() => Promise<T>) | undefined): Promise<T | { error: string } | undefined> {
  if (!read) return undefined;
  try {
    return await read();
  } catch (error) {
    return { error: (error as Error).message };
  }
}
