// Driver-free, so telemetry can read SQL Server error numbers without loading mssql on a PostgreSQL worker.

interface Node {
  readonly error: object;
  readonly depth: number;
}

/**
 * Every error object inside what `mssql` and `tedious` raised: mssql's RequestError keeps the driver's error
 * as `originalError` (with the server's token as `info` on one path) and earlier errors of the same request as
 * `precedingErrors`; tedious raises an AggregateError when one request gets several error tokens, and for
 * connection attempts to several addresses. Any `errors` array is walked, not only an AggregateError's:
 * @azure/identity's AggregateAuthenticationError (from DefaultAzureCredential) is a plain Error with one.
 */
export function sqlServerErrorChain(error: unknown): object[] {
  const seen = new Set<object>();
  const out: object[] = [];
  const stack: Node[] = typeof error === "object" && error !== null ? [{ error, depth: 0 }] : [];
  while (stack.length > 0) {
    const { error: e, depth } = stack.pop()!;
    if (seen.has(e) || depth > 8) continue;
    seen.add(e);
    out.push(e);
    const record = e as Record<string, unknown>;
    const children: unknown[] = [record.originalError, record.info, record.cause];
    if (Array.isArray(record.precedingErrors)) children.push(...(record.precedingErrors as unknown[]));
    if (Array.isArray(record.errors)) children.push(...(record.errors as unknown[]));
    for (const child of children) {
      if (typeof child === "object" && child !== null) stack.push({ error: child, depth: depth + 1 });
    }
  }
  return out;
}

/** The SQL Server error numbers in the chain (mssql copies `number`; tedious sets it from the error token). */
export function sqlServerErrorNumbers(error: unknown): number[] {
  return sqlServerErrorChain(error)
    .map((e) => (e as { number?: unknown }).number)
    .filter((n): n is number => typeof n === "number");
}
