import { postgresBackend } from "./backends.ts";
import { inboxConformance } from "./inbox-suite.ts";

inboxConformance(postgresBackend);
