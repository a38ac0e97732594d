import assert from "node:assert/strict";
import { runSchemaName, scalar, sqlServerBackend } from "./backends.ts";
import { CREATE_SCHEMA } from "../../src/inbox/sqlserver/statements.ts";
import { disposingAfter } from "./guards.ts";

// Registered only when a SQL Server is given (SBINBOX_TEST_MSSQL); never a skipped test.
const connectionString = process.env.SBINBOX_TEST_MSSQL;
if (connectionString) {
  const backend = sqlServerBackend(connectionString);
  describe(`conformance clean-up: ${backend.name}`, function () {
    it("the schema drop removes every table of a schema, then the schema", async function () {
      const db = await backend.database("cleanup");
      await disposingAfter(db, async () => {
        const schema = runSchemaName("drop_check");
        const q = `[${schema}]`;
        await db.raw.query(CREATE_SCHEMA, [schema]);
        for (const table of ["First", "Second", "Third"])
          await db.raw.query(`CREATE TABLE ${q}.${table} (Id int NOT NULL PRIMARY KEY)`);
        await db.raw.query(db.sql.dropSchema!, [schema]);
        const left = `SELECT COUNT(*) AS n FROM sys.tables AS t JOIN sys.schemas AS s ON s.schema_id = t.schema_id
          WHERE s.name = @p1`;
        assert.equal(await scalar(db.raw, left, [schema]), 0, "tables left in the dropped schema");
        assert.equal(
          await scalar(db.raw, "SELECT COUNT(*) AS n FROM sys.schemas WHERE name = @p1", [schema]),
          0,
        );
      });
    });
  });
}
