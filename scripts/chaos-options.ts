// The chaos run's command line: its options, their checks and the seeded generator that makes a run's kill schedule
// repeatable (scripts/chaos.ts).
import { parseArgs } from "node:util";

/**
 * The queue's duplicate detection window: late resends wait it out and reach the inbox. The relays use it too, and
 * send no row first tried longer ago than the window less their margin (a stale row, docs/outbox.md). Azure's
 * smallest, 20 s, left the relays 15 s from a row's first try, which a loaded machine outlasts several ways: relays
 * SIGKILLed one after the other while holding a batch's lease (kills come every few seconds, a Node start-up takes
 * seconds), claims slower than the 1 s the lease left for them (a batch not started is claimed again, its first
 * try kept), the database restart (about 12 s) and the relays' doubling back-off (1, 2, 4, 8 s). A 10,000-event
 * run with it was left with one batch (100 rows) never applied and waited for its timeout: stale rows by every
 * sign (the relays log errors only, so their stale warning was not seen). 60 s leaves 55 s, more than a 12 s outage
 * plus the back-off's next tries (up to 31 s after the first failure) plus a lease, or several relays in a row
 * killed holding the rows (the relays' 6 s leases in scripts/chaos.ts); the late resends then go out a minute after publishing, inside the
 * time a CI run takes anyway. --duplicate-window-ms 20000 runs it as before.
 */
const DEFAULT_DUPLICATE_WINDOW_MS = 60_000;

export const usage = `usage: npm run chaos -- [--events N] [--kill-every-ms MS] [--db-down-ms MS] [--logins-refused-ms MS]
                         [--db-silent-ms MS] [--downstream-down-ms MS] [--throttled-ms MS] [--duplicate-window-ms MS]
                         [--timeout S] [--seed N]

Exactly-once under faults: 3 worker processes, N distinct events (default 20000), 10% resent, a worker SIGKILLed
every few seconds and restarted, the database stopped and started once, then refusing logins (ALTER ROLE ...
NOLOGIN, sessions ended), then silent (a proxy stops forwarding without closing), transient handler failures, poison;
N/10 two-phase events calling an external HTTP API (deduplicating by idempotency key) that fails, resets, answers
slowly for some keys and is down for 30 s once; upstream, N/10 outbox transactions (10% rolled back) sent by two
relay processes that are SIGKILLed now and then; for --throttled-ms (default 15 s) the broker answers 30% of
every kind of operation (send, receive, settle, management) with ServerBusy. Then a session round (scripts/chaos-sessions.ts): N/4 credits
numbered within 40 accounts on a session queue, 3 workers in session mode, the kills, resends, poison and
transient failures again; it must also keep each account's order (out_of_order=0).
Exit code 0 only if nothing is lost, nothing is doubled and only the poison is dead-lettered; 3 if the run did
not finish in time (starved: a timeout is a failure, told apart), 1 for any other failure.
`;

export interface Options {
  events: number;
  killEveryMs: number;
  dbDownMs: number;
  loginsRefusedMs: number;
  dbSilentMs: number;
  downstreamDownMs: number;
  throttledMs: number;
  duplicateWindowMs: number;
  timeoutMs: number;
  seed: number;
}

export function options(argv: string[]): Options | string {
  let values;
  try {
    values = parseArgs({
      args: argv,
      options: {
        events: { type: "string", default: "20000" },
        "kill-every-ms": { type: "string", default: "3000" },
        "db-down-ms": { type: "string", default: "10000" },
        "logins-refused-ms": { type: "string", default: "4000" },
        "db-silent-ms": { type: "string", default: "5000" },
        "downstream-down-ms": { type: "string", default: "30000" },
        "throttled-ms": { type: "string", default: "15000" },
        "duplicate-window-ms": { type: "string", default: String(DEFAULT_DUPLICATE_WINDOW_MS) },
        timeout: { type: "string", default: "570" },
        seed: { type: "string", default: String(Date.now() % 1_000_000) },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    return (error as Error).message;
  }
  if (values.help) return "";
  const o = {
    events: Number(values.events),
    killEveryMs: Number(values["kill-every-ms"]),
    dbDownMs: Number(values["db-down-ms"]),
    loginsRefusedMs: Number(values["logins-refused-ms"]),
    dbSilentMs: Number(values["db-silent-ms"]),
    downstreamDownMs: Number(values["downstream-down-ms"]),
    throttledMs: Number(values["throttled-ms"]),
    duplicateWindowMs: Number(values["duplicate-window-ms"]),
    timeoutMs: Number(values.timeout) * 1000,
    seed: Number(values.seed),
  };
  if (!Number.isInteger(o.events) || o.events < 100) return "--events must be a whole number of at least 100";
  if (!(o.killEveryMs >= 500)) return "--kill-every-ms must be at least 500";
  if (!(o.dbDownMs >= 0)) return "--db-down-ms must be a number of milliseconds";
  if (!(o.loginsRefusedMs >= 0)) return "--logins-refused-ms must be a number of milliseconds";
  if (!(o.dbSilentMs >= 0)) return "--db-silent-ms must be a number of milliseconds";
  if (!(o.downstreamDownMs >= 0)) return "--downstream-down-ms must be a number of milliseconds";
  if (!(o.throttledMs >= 0)) return "--throttled-ms must be a number of milliseconds";
  // Azure's range; the relays refuse a window their lease and poll do not fit in twice.
  if (!(o.duplicateWindowMs >= 20_000 && o.duplicateWindowMs <= 7 * 86_400_000))
    return "--duplicate-window-ms must be between 20000 (Azure's smallest) and 7 days";
  if (!(o.timeoutMs > 0)) return "--timeout must be a positive number of seconds";
  if (!Number.isInteger(o.seed)) return "--seed must be a whole number";
  return o;
}

/** mulberry32: a seeded generator, so a failing run's kill schedule can be replayed with --seed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
