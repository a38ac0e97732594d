import type { DatabaseTarget } from "../config/load.ts";
import type { OutboxStore } from "./store.ts";

/** The outbox store for a configured database, loading only that database's driver. */
export async function openOutboxStore(target: DatabaseTarget): Promise<OutboxStore> {
  if (target.kind === "postgres") {
    const { createPostgresOutboxStore } = await import("./postgres/store.ts");
    return createPostgresOutboxStore({ url: target.url });
  }
  const { createSqlServerOutboxStore } = await import("./sqlserver/store.ts");
  if (target.kind === "sqlserver") return createSqlServerOutboxStore({ config: target.connectionString });
  const { DefaultAzureCredential } = await import("@azure/identity");
  return createSqlServerOutboxStore({
    config: {
      server: target.server,
      database: target.database,
      options: { encrypt: true, trustServerCertificate: false },
      // tedious asks the credential for a token on every new connection (Entra ID, no password anywhere).
      authentication: { type: "token-credential", options: { credential: new DefaultAzureCredential() } },
    } as never,
  });
}
