import pg from "pg";
import { postgresPoolConfig } from "../../src/inbox/postgres/pool.ts";

/** Statements sent and round trips waited, counted on the client for every connection of one pool. */
export interface RoundTrips {
  statements: number;
  roundTrips: number;
}

/**
 * A pool (postgresPoolConfig's, `pipeline` as given) whose clients count what they send. A round trip starts when
 * a statement goes out on a connection with nothing in flight; statements sent while others are in flight ride in
 * the same pipeline. Only promise-returning `query` calls count (every call the store makes). Counted into
 * `counted` when given (pools that share one count).
 */
export function countingPool(
  url: string,
  max: number,
  pipeline = true,
  counted: RoundTrips = { statements: 0, roundTrips: 0 },
): { pool: pg.Pool; counted: RoundTrips } {
  class CountingClient extends pg.Client {
    private inFlight = 0;
    constructor(config?: string | pg.ClientConfig) {
      super(config);
      const send = this.query.bind(this) as (...args: unknown[]) => unknown;
      (this as { query: unknown }).query = (...args: unknown[]) => {
        const result = send(...args);
        if (!(result instanceof Promise)) return result;
        counted.statements += 1;
        if (this.inFlight === 0) counted.roundTrips += 1;
        this.inFlight += 1;
        const done = () => {
          this.inFlight -= 1;
        };
        result.then(done, done);
        return result;
      };
    }
  }
  const pool = new pg.Pool({ ...postgresPoolConfig(url, max), pipeline, Client: CountingClient });
  pool.on("error", () => undefined);
  return { pool, counted };
}
