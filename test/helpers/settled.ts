import type { LocalBroker } from "../../src/localbroker/broker.ts";
import { waitUntil } from "./broker.ts";

/** What a worker counts: a delivery is committed, or found done (a redelivery of one already applied). */
interface SettleStats {
  readonly committed: number;
  readonly duplicate: number;
}

/**
 * Waits until `total` messages are settled for good: the worker's count of deliveries reaches `total` AND the
 * queue holds nothing active or locked. The count alone ends too early under load: a completion that fails after
 * its commit (the lock lapsed before a late renewal) brings the message back, and that redelivery counts as a
 * duplicate while another message is still to be applied; the empty queue is what says every effect is in.
 */
export async function waitUntilSettled(
  broker: LocalBroker,
  queue: string,
  stats: () => SettleStats,
  total: number,
  timeoutMs: number,
): Promise<void> {
  await waitUntil(
    () => {
      const { committed, duplicate } = stats();
      if (committed + duplicate < total) return false;
      const counts = broker.counts(queue);
      return counts.active + counts.locked === 0;
    },
    `${total} messages are applied and ${queue} is empty`,
    timeoutMs,
  );
}
