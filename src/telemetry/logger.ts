import { trace } from "@opentelemetry/api";
import {
  destination as pinoDestination,
  pino,
  stdTimeFunctions,
  type DestinationStream,
  type Logger as PinoLogger,
} from "pino";

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

export const REDACTED = "[redacted]";

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

/**
 * Secrets inside free text (an error message quoting a connection string): the value after the key is masked.
 * A development emulator's key (`UseDevelopmentEmulator=true`, the local broker's) is public and stays readable,
 * so a worker on embedded defaults can log where to publish. Neither part crosses a quote: a line is JSON, and a
 * match running from one string field into the next would swallow both.
 */
const SECRET_IN_TEXT =
  /((?:SharedAccessKey|SharedAccessSignature|AccountKey|Password|Pwd|InstrumentationKey)\s*=\s*)(?![^;"\s]+;UseDevelopmentEmulator=true)[^;"\s]+|(\w+:\/\/[^:/@\s"]+:)[^@\s"]+(@)/gi;

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
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: REDACTED_FIELDS.flatMap((name) => [name, `*.${name}`]),
        censor: REDACTED,
      },
      serializers: { error: serializeError, err: serializeError },
      mixin: traceIds,
      hooks: { streamWrite: maskSecrets },
    },
    destination,
  );
  return wrap(options.fields ? root.child(options.fields) : root);
}

/** A logger that drops everything, for tests and library defaults. */
export const silentLogger: Logger = createLogger({ write: () => undefined, level: "error" });

function wrap(logger: PinoLogger): Logger {
  return {
    debug: (m, f) => logger.debug(f ?? {}, m),
    info: (m, f) => logger.info(f ?? {}, m),
    warn: (m, f) => logger.warn(f ?? {}, m),
    error: (m, f) => logger.error(f ?? {}, m),
    child: (fields) => wrap(logger.child(fields)),
  };
}

function traceIds(): LogFields {
  const span = trace.getActiveSpan()?.spanContext();
  return span ? { trace_id: span.traceId, span_id: span.spanId } : {};
}

/** Name, message and the structured codes only: no stack, and none of the driver's own fields (its config). */
function serializeError(value: unknown): unknown {
  if (!(value instanceof Error)) return value;
  const extra = value as Error & { code?: unknown; number?: unknown };
  return { name: value.name, message: value.message, code: extra.code, number: extra.number };
}

function maskSecrets(line: string): string {
  return line.replace(SECRET_IN_TEXT, (_m, key?: string, scheme?: string, at?: string) =>
    key !== undefined ? `${key}${REDACTED}` : `${scheme}${REDACTED}${at}`,
  );
}
