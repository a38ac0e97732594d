import { postgresBackend } from "../conformance/backends.ts";
import { statementFaultsSuite } from "./statement-faults-suite.ts";

statementFaultsSuite(postgresBackend);
