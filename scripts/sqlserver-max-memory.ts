// `node scripts/sqlserver-max-memory.ts <MB>`: caps the buffer pool of the SQL Server at SBINBOX_TEST_MSSQL
// ("max server memory (MB)", an advanced option), so a CI-sized inbox outgrows it and the growth bench's physical
// reads show (.github/workflows/ci.yml). Prints the value in use afterwards.
import mssql from "mssql";

const mb = Number(process.argv[2]);
const url = process.env.SBINBOX_TEST_MSSQL ?? "";
// SQL Server refuses less than 128 MB.
if (!Number.isInteger(mb) || mb < 128)
  throw new Error("sqlserver-max-memory: give the cap in MB, at least 128");
if (url === "")
  throw new Error("sqlserver-max-memory: set SBINBOX_TEST_MSSQL to the server's connection string");

const pool = await new mssql.ConnectionPool(url).connect();
try {
  await pool
    .request()
    .input("mb", mssql.Int, mb)
    .batch(
      "EXEC sp_configure 'show advanced options', 1; RECONFIGURE; EXEC sp_configure 'max server memory (MB)', @mb; RECONFIGURE;",
    );
  const r = await pool
    .request()
    .query<{ mb: number }>(
      "SELECT CAST(value_in_use AS int) AS mb FROM sys.configurations WHERE name = 'max server memory (MB)'",
    );
  process.stdout.write(`max server memory (MB) in use: ${r.recordset[0]!.mb}\n`);
} finally {
  await pool.close();
}
