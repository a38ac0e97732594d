import { stopSharedPostgres } from "./postgres.ts";

export const mochaHooks = {
  async afterAll(this: Mocha.Context): Promise<void> {
    this.timeout(30_000);
    await stopSharedPostgres();
  },
};
