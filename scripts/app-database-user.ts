/** The T-SQL that makes the worker's managed identity a least-privilege database user (see grant-app-database-user.ts). */

// The worker only reads and writes rows; the schema belongs to `sbinbox migrate`, run as the admin.
export const appRoles = ["db_datareader", "db_datawriter"] as const;

const namePattern = /^[A-Za-z0-9][A-Za-z0-9-]{0,59}$/;
const guidPattern = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** The batch, idempotent: re-running it on every deployment is harmless. */
export function grantBatch(appName: string, clientId?: string): string {
  if (!namePattern.test(appName)) throw new Error(`WORKER_APP_NAME "${appName}" is not an App Service name`);
  if (clientId !== undefined && !guidPattern.test(clientId)) {
    throw new Error(`WORKER_APP_CLIENT_ID "${clientId}" is not a GUID`);
  }
  const create =
    clientId === undefined
      ? `CREATE USER [${appName}] FROM EXTERNAL PROVIDER`
      : `CREATE USER [${appName}] WITH SID = ${sidLiteral(clientId)}, TYPE = E`;
  return [
    `IF DATABASE_PRINCIPAL_ID(N'${appName}') IS NULL`,
    `  EXEC(N'${create.replaceAll("'", "''")}');`,
    // Adding an existing member is a no-op, so this needs no guard.
    ...appRoles.map((role) => `ALTER ROLE [${role}] ADD MEMBER [${appName}];`),
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
