import type { InboxDriver } from "./driver.ts";
import { idParams } from "./batch-precheck.ts";

/**
 * The consumers this store has registered in InboxConsumer: once each per process, before its first marker (a
 * marker names its consumer by a 2-byte Id found from the name). A failed registration is tried again next time.
 */
export class ConsumerRegistry {
  private readonly done = new Map<string, Promise<void>>();
  private readonly driver: Pick<InboxDriver, "query" | "statements">;
  constructor(driver: Pick<InboxDriver, "query" | "statements">) {
    this.driver = driver;
  }

  register(consumer: string): Promise<void> {
    let registered = this.done.get(consumer);
    if (registered === undefined) {
      registered = this.driver.query(this.driver.statements.registerConsumer, [consumer]).then(
        () => undefined,
        (error: unknown) => {
          this.done.delete(consumer);
          throw error;
        },
      );
      this.done.set(consumer, registered);
    }
    return registered;
  }
}

/** SQL Server's VALUES and IN lists: at most this many ids in one read of the legacy table. */
const LEGACY_READ_ROWS = 1000;

/**
 * The inbox table before migration 0002 (InboxLegacy). The migration renamed it and nothing writes it since, so
 * its processed markers are final: a message found there is a duplicate, one not found never will be. Read only
 * while it has rows (asked once, then again after each cleanup run, which empties it with the retention).
 */
export class LegacyInbox {
  private present: Promise<boolean> | undefined;
  private readonly driver: Pick<InboxDriver, "query" | "legacy" | "dialect">;
  constructor(driver: Pick<InboxDriver, "query" | "legacy" | "dialect">) {
    this.driver = driver;
  }

  private hasRows(): Promise<boolean> {
    this.present ??= (async () => {
      const sql = this.driver.legacy;
      const exists = (await this.driver.query<{ found: unknown }>(sql.exists)).rows[0]?.found;
      if (!truthy(exists)) return false;
      return truthy((await this.driver.query<{ found: unknown }>(sql.hasRows)).rows[0]?.found);
    })().catch((error: unknown) => {
      this.present = undefined;
      throw error;
    });
    return this.present;
  }

  /** The ids among `messageIds` with a processed marker in the legacy table (none once it is empty). */
  async processed(consumer: string, messageIds: readonly string[]): Promise<ReadonlySet<string>> {
    const found = new Set<string>();
    for (const [id, done] of await this.markers(consumer, messageIds)) if (done) found.add(id);
    return found;
  }

  /**
   * The legacy marker of one message: processed, an open claim (its holder, a worker of the previous version,
   * may still be performing its external effect: busy until the sweeper removes it, as a claim in the new
   * table), or none. One read, the same as processed().
   */
  async state(consumer: string, messageId: string): Promise<"processed" | "open" | "none"> {
    const done = (await this.markers(consumer, [messageId])).get(messageId);
    return done === undefined ? "none" : done ? "processed" : "open";
  }

  /** Deletes the open claims there taken more than olderThan ago (the sweeper's rule for the new table). */
  async sweepStaleClaims(olderThan: [number, number]): Promise<number> {
    if (!(await this.hasRows())) return 0;
    return (await this.driver.query(this.driver.legacy.sweepStaleClaims, olderThan)).rowCount;
  }

  private async markers(
    consumer: string,
    messageIds: readonly string[],
  ): Promise<ReadonlyMap<string, boolean>> {
    if (messageIds.length === 0 || !(await this.hasRows())) return NONE;
    const found = new Map<string, boolean>();
    for (let at = 0; at < messageIds.length; at += LEGACY_READ_ROWS) {
      const ids = messageIds.slice(at, at + LEGACY_READ_ROWS);
      const rows = await this.driver.query<{ id: string; done: unknown }>(
        this.driver.legacy.processed(ids.length),
        idParams(this.driver.dialect === "postgres", consumer, ids),
      );
      for (const row of rows.rows) found.set(row.id, truthy(row.done));
    }
    return found;
  }

  /** Deletes its rows received before `cutoff`, in batches; then asks again whether it has any left. */
  async cleanup(cutoff: Date, batchSize: number, onBatch?: (deleted: number) => void): Promise<number> {
    if (!(await this.hasRows())) return 0;
    let total = 0;
    for (;;) {
      const { rowCount } = await this.driver.query(this.driver.legacy.cleanupBatch, [cutoff, batchSize]);
      total += rowCount;
      onBatch?.(rowCount);
      if (rowCount < batchSize) break;
    }
    this.present = undefined;
    return total;
  }
}

function truthy(value: unknown): boolean {
  return value === true || Number(value) === 1;
}

const NONE: ReadonlyMap<string, boolean> = new Map();
