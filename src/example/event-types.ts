/** The example's event type names, apart from its handlers, so the demo's publisher loads no schema (zod). */
export const ACCOUNT_CREDITED = "AccountCredited";
