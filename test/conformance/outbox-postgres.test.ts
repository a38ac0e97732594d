import { postgresBackend } from "./backends.ts";
import { outboxConformance } from "./outbox-suite.ts";

outboxConformance(postgresBackend);
