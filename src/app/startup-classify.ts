import type { InboxStore } from "../inbox/store.ts";
import { sqlServerErrorChain } from "../inbox/sqlserver/error-chain.ts";
import { serviceBusRefused } from "../servicebus/probe.ts";
import type { StartupFailureKind } from "./startup.ts";

/** @azure/identity's errors: no managed identity, or a token refused by Entra ID. */
const CREDENTIAL_ERRORS = new Set([
  "CredentialUnavailableError",
  "AuthenticationError",
  "AuthenticationRequiredError",
]);

/**
 * A database error at start-up. The store's own classifier decides for everything it knows (a lost or refused
 * connection is `unavailable`, a deadlock `transient`, a missing database or a bad password `permanent`).
 * SQL Server is the exception: tedious reports a refused login as a ConnectionError (code ELOGIN), which the
 * store rightly counts as `unavailable` for a running worker, so the login codes are read here first. A login
 * error that tedious marks `isTransient` (40613 during a failover) is an outage.
 */
export function databaseStartupFailure(store: InboxStore): (error: unknown) => StartupFailureKind {
  return (error) => {
    if (refusedSqlServerLogin(error)) return "refused";
    if (credentialError(error)) return "refused";
    return store.classify(error) === "permanent" ? "refused" : "unreachable";
  };
}

export function refusedSqlServerLogin(error: unknown): boolean {
  return sqlServerErrorChain(error).some((e) => {
    const { code, isTransient } = e as { code?: unknown; isTransient?: unknown };
    return (code === "ELOGIN" && isTransient !== true) || code === "EFEDAUTH";
  });
}

/** A Service Bus error at start-up: a refusal or a credential error is `refused`, anything else an outage. */
export function serviceBusStartupFailure(error: unknown): StartupFailureKind {
  return serviceBusRefused(error) || credentialError(error) ? "refused" : "unreachable";
}

/** Anywhere in the error's causes: tedious and the SDK wrap the credential's error. */
function credentialError(error: unknown): boolean {
  return sqlServerErrorChain(error).some((e) => e instanceof Error && CREDENTIAL_ERRORS.has(e.name));
}

/** PostgreSQL's answers that refuse: bad password or role, no such database, no privilege. */
const REFUSING_POSTGRES_CODES = new Set(["28P01", "28000", "3D000", "42501"]);

/** A database error at the relay's start-up (it has no inbox store to ask): a refusal, or an outage. */
export function outboxDatabaseStartupFailure(error: unknown): StartupFailureKind {
  if (refusedSqlServerLogin(error) || credentialError(error)) return "refused";
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && REFUSING_POSTGRES_CODES.has(code) ? "refused" : "unreachable";
}
