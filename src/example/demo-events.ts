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

/**
 * The n-th event of the sessions demo: the accounts take turns (event n is account n mod `accounts`), each event
 * numbered within its account from 1, and the account is its session, so its credits must be applied in that order.
 */
export function sessionEvent(runId: string, index: number, accounts: number): PublishEvent {
  const accountId = `acc-${index % accounts}`;
  const sequence = Math.floor(index / accounts) + 1;
  return {
    type: ACCOUNT_CREDITED,
    key: `${runId}-${accountId}-${sequence}`,
    sessionId: accountId,
    body: {
      accountId,
      amount: (index % 100) + 1,
      sequence,
      reference: `demo ${runId} ${accountId} #${sequence}`,
    },
  };
}
