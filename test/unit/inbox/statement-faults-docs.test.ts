import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Dialect } from "../../../src/domain/sql.ts";
import { STATEMENT_FAULTS, type StatementFault } from "../../../src/inbox/statement-faults.ts";

const HEADERS: Record<Dialect, string> = {
  postgres: "| SQLSTATE | the handler's statement | class | retried on |",
  sqlserver: "| error number or driver code | the handler's statement | class | retried on |",
};

function row(fault: StatementFault): string {
  const also = (fault.also ?? []).map((c) => ` (\`${c}\`)`).join("");
  const schedule =
    (fault.retry === "migration" ? "the migration schedule" : "the permanent schedule") +
    (fault.refusedAsStatements === true ? "; a statements handler's: `NotRetryable` at once" : "");
  return `| \`${fault.code}\`${also} ${fault.name} | ${fault.mistake} | \`permanent\` | ${schedule} |`;
}

/** The table docs/failure-handling.md shows for a dialect, as STATEMENT_FAULTS gives it. */
function renderStatementFaults(dialect: Dialect): string {
  return [HEADERS[dialect], "| --- | --- | --- | --- |", ...STATEMENT_FAULTS[dialect].map(row)].join("\n");
}

/**
 * docs/failure-handling.md shows STATEMENT_FAULTS, the table test/integration/statement-faults-*.test.ts raises row by
 * row on the real servers: the docs' tables must be that table, rendered, so the two cannot drift apart.
 */
describe("docs/failure-handling.md's tables of a handler's statement errors match STATEMENT_FAULTS", () => {
  const doc = readFileSync(new URL("../../../docs/failure-handling.md", import.meta.url), "utf8");
  for (const dialect of ["postgres", "sqlserver"] as const) {
    it(`the ${dialect} table, row for row`, () => {
      const expected = renderStatementFaults(dialect);
      const header = expected.split("\n")[0]!;
      const at = doc.indexOf(`${header}\n`);
      assert.ok(at >= 0, `the docs have no table headed ${header}`);
      const shown = doc.slice(at).split("\n\n")[0]!.trim();
      assert.equal(shown, expected);
    });
  }
});
