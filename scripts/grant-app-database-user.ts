/**
 * Post-provision step: makes the worker's managed identity a database user with read and write rights only.
 * Bicep cannot do this (it is T-SQL inside the database), so infra/scripts/postprovision.sh runs it as the
 * server's Entra admin, signed in through DefaultAzureCredential (the Azure CLI login). No password exists.
 *
 *   SQL_SERVER_FQDN, SQL_DATABASE_NAME, WORKER_APP_NAME   required
 *   WORKER_APP_CLIENT_ID   optional: the identity's application (client) ID; when set the user is created from
 *                          it (WITH SID, TYPE = E), so the server needs no Directory Readers role in Entra ID.
 */
import mssql from "mssql";
import { appRoles, grantBatch } from "./app-database-user.ts";

function required(env: NodeJS.ProcessEnv, name: string): string {
  const value = env[name]?.trim();
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function main(env: NodeJS.ProcessEnv): Promise<number> {
  const server = required(env, "SQL_SERVER_FQDN");
  const database = required(env, "SQL_DATABASE_NAME");
  const appName = required(env, "WORKER_APP_NAME");
  const clientId = env.WORKER_APP_CLIENT_ID?.trim() || undefined;
  const batch = grantBatch(appName, clientId);
  const pool = new mssql.ConnectionPool({
    server,
    database,
    options: { encrypt: true },
    authentication: { type: "azure-active-directory-default", options: {} },
  });
  await pool.connect();
  try {
    await pool.request().batch(batch);
  } finally {
    await pool.close();
  }
  process.stdout.write(`database user [${appName}] in ${database}: ${appRoles.join(", ")}\n`);
  return 0;
}

process.exitCode = await main(process.env);
