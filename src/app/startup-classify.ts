import type { InboxStore } from "../inbox/store.ts";
import { sqlServerErrorChain, sqlServerErrorNumbers } from "../inbox/sqlserver/error-chain.ts";
import { serviceBusRefused } from "../servicebus/probe.ts";
import type { StartupFailureKind } from "./startup.ts";

/** @azure/identity's errors: no managed identity, or a token refused by Entra ID. */
const CREDENTIAL_ERRORS = new Set([
  "CredentialUnavailableError",
  "AuthenticationError",
  "AuthenticationRequiredError",
]);

/**
 * Azure SQL's "not available now" login errors: the database is failing over, paused, being moved, or at its
 * worker/session limit (4060 is also what a serverless database answers while it resumes). Waited out like an
 * outage, never counted against the start-up limit. By number, which the pool puts on the login's error.
 */
const UNAVAILABLE_LOGIN_NUMBERS = new Set([4060, 10928, 10929, 40197, 40501, 40613, 49918, 49919, 49920]);

/** No answer from the identity endpoint (IMDS, App Service's identity endpoint, Entra): an outage. */
const CREDENTIAL_NETWORK_CODES = new Set([
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
]);

/**
 * A database error at start-up. The store's own classifier decides for everything it knows (a lost or refused
 * connection is `unavailable`, a deadlock `transient`, a missing database or a bad password `permanent`).
 * SQL Server is the exception: tedious reports a refused login as a ConnectionError (code ELOGIN), which the
 * store rightly counts as `unavailable` for a running worker, so the login codes are read here first: an
 * Azure SQL "not available now" number is an outage, any other refused login a refusal. A token the credential
 * could not get (EFEDAUTH, with the credential's error beside it) is classified by that credential error.
 */
export function databaseStartupFailure(store: InboxStore): (error: unknown) => StartupFailureKind {
  return (error) => {
    const credential = credentialFailure(error);
    if (credential) return credential;
    if (sqlServerErrorNumbers(error).some((n) => UNAVAILABLE_LOGIN_NUMBERS.has(n))) return "unreachable";
    if (refusedSqlServerLogin(error) || refusedPostgres(error)) return "refused";
    return store.classify(error) === "permanent" ? "refused" : "unreachable";
  };
}

export function refusedSqlServerLogin(error: unknown): boolean {
  return sqlServerErrorChain(error).some((e) => {
    const { code, isTransient } = e as { code?: unknown; isTransient?: unknown };
    return (code === "ELOGIN" && isTransient !== true) || code === "EFEDAUTH";
  });
}

/** A Service Bus error at start-up: a refusal is `refused`, a credential error as it says, anything else an outage. */
export function serviceBusStartupFailure(error: unknown): StartupFailureKind {
  return credentialFailure(error) ?? (serviceBusRefused(error) ? "refused" : "unreachable");
}

/**
 * A credential error anywhere in the error's causes (tedious and the SDK wrap it; DefaultAzureCredential's
 * AggregateAuthenticationError holds one per credential it tried): `unreachable` when the identity endpoint did
 * not answer (MSAL's network_error, a network code, a 5xx), `refused` otherwise (no identity configured, a
 * token refused). Undefined when no credential was involved.
 */
function credentialFailure(error: unknown): StartupFailureKind | undefined {
  const chain = sqlServerErrorChain(error);
  if (!chain.some((e) => e instanceof Error && CREDENTIAL_ERRORS.has(e.name))) return undefined;
  const noAnswer = chain.some((e) => {
    const { errorCode, code, statusCode } = e as {
      errorCode?: unknown;
      code?: unknown;
      statusCode?: unknown;
    };
    return (
      errorCode === "network_error" ||
      (typeof code === "string" && CREDENTIAL_NETWORK_CODES.has(code)) ||
      (typeof statusCode === "number" && statusCode >= 500)
    );
  });
  return noAnswer ? "unreachable" : "refused";
}

/** PostgreSQL's answers that refuse: bad password or role, no such database, no privilege. */
const REFUSING_POSTGRES_CODES = new Set(["28P01", "28000", "3D000", "42501"]);

/** A database error at the relay's start-up (it has no inbox store to ask): a refusal, or an outage. */
export function outboxDatabaseStartupFailure(error: unknown): StartupFailureKind {
  const credential = credentialFailure(error);
  if (credential) return credential;
  if (sqlServerErrorNumbers(error).some((n) => UNAVAILABLE_LOGIN_NUMBERS.has(n))) return "unreachable";
  return refusedSqlServerLogin(error) || refusedPostgres(error) ? "refused" : "unreachable";
}

/**
 * The inbox store counts a refused login as `unavailable` (for a running worker it is an outage to wait out); at
 * start-up it is a refusal, retried only up to SBINBOX_STARTUP_LIMIT_MS.
 */
function refusedPostgres(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && REFUSING_POSTGRES_CODES.has(code);
}
