import type { PublishEvent } from "../servicebus/publisher.ts";
import { ACCOUNT_CREDITED } from "./event-types.ts";

/** The n-th demo event of a run: a credit to one of 50 accounts, keyed by run and index. */
export function demoEvent(runId: string, index: number): PublishEvent {
  return {
    type: ACCOUNT_CREDITED,
    key: `${runId}-${index}`,
    body: { accountId: `acc-${index % 50}`, amount: (index % 100) + 1, reference: `demo ${runId} #${index}` },
  };
}
