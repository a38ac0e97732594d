import type pg from "pg";
import { BEGIN, COMMIT, ROLLBACK } from "../src/inbox/postgres/statements.ts";

/** Bare SQL on one pooled client between BEGIN and COMMIT, rolled back on error: the benches' baseline. */
export async function inBareTransaction(
  pool: pg.Pool,
  work: (client: pg.PoolClient) => Promise<void>,
): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query(BEGIN);
    await work(client);
    await client.query(COMMIT);
  } catch (error) {
    await client.query(ROLLBACK);
    throw error;
  } finally {
    client.release();
  }
}

/** Right-aligned columns, each as wide as its widest cell. */
export function formatTable(header: readonly string[], rows: readonly string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((cell, i) => cell.padStart(widths[i]!)).join("  ");
  return [line(header), ...rows.map(line)];
}
