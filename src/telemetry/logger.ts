import { isSpanContextValid, trace } from "@opentelemetry/api";
import {
  destination as pinoDestination,
  pino,
  stdTimeFunctions,
  type DestinationStream,
  type Logger as PinoLogger,
} from "pino";
import { maskText, maskValue, REDACTED } from "./mask.ts";

export { REDACTED };

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go; one JSON object per line, without the newline. Default: stderr, written synchronously. */
  write?: (line: string) => void;
  fields?: LogFields;
}

/**
 * Field names that may hold a message body or a connection secret, at the top level or one level down: pino
 * replaces them wherever a caller puts them by accident.
 */
export const REDACTED_FIELDS: readonly string[] = [
  "body",
  "payload",
  "password",
  "connectionString",
  "accessToken",
  "token",
  "sharedAccessKey",
  "SBINBOX_SERVICEBUS_CONNECTION_STRING",
  "SBINBOX_POSTGRES_URL",
  "SBINBOX_SQLSERVER_CONNECTION_STRING",
  "APPLICATIONINSIGHTS_CONNECTION_STRING",
];

/** Structured JSON lines (pino) carrying the active span's trace and span ids, so logs join traces. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const destination: DestinationStream = options.write
    ? { write: (line: string) => options.write!(line.endsWith("\n") ? line.slice(0, -1) : line) }
    : pinoDestination({ fd: 2, sync: true });
  const root = pino(
    {
      level: options.level ?? "info",
      base: null,
      messageKey: "msg",
      timestamp: stdTimeFunctions.isoTime,
      formatters: {
        level: (label) => ({ level: label }),
        log: (fields) => maskValue(fields) as LogFields,
      },
      redact: {
        paths: REDACTED_FIELDS.flatMap((name) => [name, `*.${name}`]),
        censor: REDACTED,
      },
      mixin: traceIds,
    },
    destination,
  );
  return wrap(options.fields ? root.child(maskValue(options.fields) as LogFields) : root);
}

/** A logger that drops everything, for tests and library defaults. */
export const silentLogger: Logger = createLogger({ write: () => undefined, level: "error" });

function wrap(logger: PinoLogger): Logger {
  return {
    debug: (m, f) => logger.debug(f ?? {}, maskText(m)),
    info: (m, f) => logger.info(f ?? {}, maskText(m)),
    warn: (m, f) => logger.warn(f ?? {}, maskText(m)),
    error: (m, f) => logger.error(f ?? {}, maskText(m)),
    child: (fields) => wrap(logger.child(maskValue(fields) as LogFields)),
  };
}

/** The active span's ids; none for a span that carries no trace (all zeros), which would join unrelated lines. */
function traceIds(): LogFields {
  const span = trace.getActiveSpan()?.spanContext();
  return span && isSpanContextValid(span) ? { trace_id: span.traceId, span_id: span.spanId } : {};
}
