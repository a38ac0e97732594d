import { createLogger, type Logger } from "../../src/telemetry/logger.ts";

/** A debug-level logger that keeps its JSON lines, parsed, for a test to read. */
export function capturedLogs(): { logger: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({
    level: "debug",
    write: (line) => lines.push(JSON.parse(line) as Record<string, unknown>),
  });
  return { logger, lines };
}
