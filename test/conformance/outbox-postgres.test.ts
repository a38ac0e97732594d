import { postgresBackend } from "./backends.ts";
import { outboxSessionsConformance } from "./outbox-sessions-suite.ts";
import { outboxConformance } from "./outbox-suite.ts";

outboxConformance(postgresBackend);
outboxSessionsConformance(postgresBackend);
