import { postgresBackend } from "./backends.ts";
import { cleanupLockConformance } from "./cleanup-lock-suite.ts";
import { cleanupPaceConformance } from "./cleanup-pace-suite.ts";
import { inboxConformance } from "./inbox-suite.ts";
import { statementsConformance } from "./statements-suite.ts";
import { transactionHandleConformance } from "./transaction-handle-suite.ts";

inboxConformance(postgresBackend);
transactionHandleConformance(postgresBackend);
statementsConformance(postgresBackend);
cleanupPaceConformance(postgresBackend);
cleanupLockConformance(postgresBackend);
