import { sqlServerBackend } from "../conformance/backends.ts";
import { statementFaultsSuite } from "./statement-faults-suite.ts";

// Registered only when a SQL Server is given (the SQL Server tier, scripts/sqlserver-tier.sh); never a skipped test.
const connectionString = process.env.SBINBOX_TEST_MSSQL;
if (connectionString) statementFaultsSuite(sqlServerBackend(connectionString));
