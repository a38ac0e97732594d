/**
 * The T-SQL that makes the worker's managed identity a least-privilege database user, run by `sbinbox migrate
 * --app-user` as the server's Entra admin. The user is created from the identity's client ID (WITH SID, TYPE = E),
 * so the server never looks the name up in Microsoft Graph and its own identity needs no directory role.
 */

// The worker only reads and writes rows; the schema belongs to `sbinbox migrate`, run as the admin.
export const appRoles = ["db_datareader", "db_datawriter"] as const;

// A user-assigned identity's name: letters, digits, hyphens and underscores, starting with a letter or digit.
const namePattern = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
const guidPattern = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/**
 * The batch, idempotent: re-running it on every deployment is harmless. A user of that name made from another
 * client ID (the identity was deleted and recreated under the same name, so it has a new client ID) keeps the old
 * SID, and the worker's sign-in would then fail as "login failed" with nothing pointing here: the batch stops with
 * an error naming the user instead. It does not drop the user itself: the admin decides (DROP USER, then rerun).
 */
export function appUserBatch(userName: string, clientId: string): string {
  // Both end up inside the batch's text (T-SQL takes no parameters for principal names), so they are checked
  // against patterns that cannot close a bracket or a string.
  if (!namePattern.test(userName)) {
    throw new Error(`--app-user "${userName}" is not a managed identity name (letters, digits, - and _)`);
  }
  if (!guidPattern.test(clientId)) throw new Error(`--app-client-id "${clientId}" is not a GUID`);
  const sid = sidLiteral(clientId);
  const create = `CREATE USER [${userName}] WITH SID = ${sid}, TYPE = E`;
  const stale =
    `database user [${userName}] exists with another SID than client ID ${clientId} gives (the identity was ` +
    `recreated?); the worker could not sign in as it: DROP USER [${userName}] and run sbinbox migrate again`;
  return [
    `IF DATABASE_PRINCIPAL_ID(N'${userName}') IS NULL`,
    `  EXEC(N'${create.replaceAll("'", "''")}');`,
    `ELSE IF (SELECT sid FROM sys.database_principals WHERE name = N'${userName}') <> ${sid}`,
    `  THROW 51000, N'${stale}', 1;`,
    // Adding an existing member is a no-op, so this needs no guard.
    ...appRoles.map((role) => `ALTER ROLE [${role}] ADD MEMBER [${userName}];`),
  ].join("\n");
}

/** An Entra application's SID is its client ID as a GUID in SQL Server's byte order. */
export function sidLiteral(clientId: string): string {
  const hex = Buffer.from(
    clientId
      .replaceAll("-", "")
      .match(/../g)!
      .map((b) => parseInt(b, 16)),
  );
  // uniqueidentifier stores the first three groups little-endian.
  const ordered = Buffer.concat([
    Buffer.from(hex.subarray(0, 4)).reverse(),
    Buffer.from(hex.subarray(4, 6)).reverse(),
    Buffer.from(hex.subarray(6, 8)).reverse(),
    hex.subarray(8),
  ]);
  return `0x${ordered.toString("hex").toUpperCase()}`;
}

/** Azure SQL's firewall refusing this client's address (error 40615): worth waiting for a new rule to apply. */
export const FIREWALL_REFUSED = 40615;

/**
 * One error of the chain is the firewall's refusal. tedious turns a login's ERROR token into a ConnectionError
 * with code ELOGIN and the server's message but drops the number (token/handler.js, onErrorMessage), so this one
 * check reads the message: 40615's fixed text, which names no setting that could vary.
 */
export function isFirewallRefusal(error: object): boolean {
  const { code, message, number } = error as { code?: unknown; message?: unknown; number?: unknown };
  if (number === FIREWALL_REFUSED) return true;
  return (
    code === "ELOGIN" &&
    typeof message === "string" &&
    /Client with IP address '[^']*' is not allowed to access the server/.test(message)
  );
}
