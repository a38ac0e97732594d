/** One answer of /healthz or /readyz. */
export interface Probe {
  status: number;
  body: Record<string, unknown>;
}

/** GET a JSON endpoint of a process under test on loopback; undefined while nothing listens yet. */
export async function getJson(port: number, path: string): Promise<Probe | undefined> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  } catch {
    return undefined; // not listening yet
  }
}

/** Polls an async condition (an HTTP probe, a query) every 50 ms until it holds. */
export async function waitUntilAsync(
  condition: () => Promise<boolean>,
  what: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
