import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { POSTGRES_SQLSTATES } from "../../../src/inbox/postgres/classify.ts";
import { SQLSERVER_ERROR_NUMBERS } from "../../../src/inbox/sqlserver/classify.ts";

/** docs/inbox.md's error tables must show every entry of the classifiers' tables, in the right row. */
describe("docs/inbox.md's error class tables match the classifiers", () => {
  const doc = readFileSync(new URL("../../../docs/inbox.md", import.meta.url), "utf8");
  const rowOf = (cell: string, errorClass: string): boolean =>
    doc
      .split("\n")
      .some((line) => line.includes(`\`${cell}\``) && line.trim().endsWith(`| \`${errorClass}\` |`));

  for (const entry of POSTGRES_SQLSTATES) {
    it(`SQLSTATE ${entry.code} is in the ${entry.errorClass} row`, () => {
      assert.ok(rowOf(entry.code, entry.errorClass));
    });
  }
  for (const entry of SQLSERVER_ERROR_NUMBERS) {
    it(`SQL Server ${entry.number} is in the ${entry.errorClass} row`, () => {
      assert.ok(rowOf(String(entry.number), entry.errorClass));
    });
  }
});
