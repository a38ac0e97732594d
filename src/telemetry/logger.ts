import { trace } from "@opentelemetry/api";

export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface LoggerOptions {
  level?: LogLevel;
  /** Where lines go; one JSON object per line. */
  write?: (line: string) => void;
  fields?: LogFields;
}

/** Structured JSON lines carrying the active span's trace and span ids, so logs join traces. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? "info";
  const write = options.write ?? ((line: string) => process.stderr.write(line + "\n"));
  const base = options.fields ?? {};
  const emit = (at: LogLevel, message: string, fields?: LogFields): void => {
    if (rank[at] < rank[level]) return;
    const span = trace.getActiveSpan()?.spanContext();
    const record: LogFields = { time: new Date().toISOString(), level: at, msg: message, ...base, ...fields };
    if (span) {
      record.trace_id = span.traceId;
      record.span_id = span.spanId;
    }
    write(JSON.stringify(record, errorReplacer));
  };
  return {
    debug: (m, f) => emit("debug", m, f),
    info: (m, f) => emit("info", m, f),
    warn: (m, f) => emit("warn", m, f),
    error: (m, f) => emit("error", m, f),
    child: (fields) => createLogger({ level, write, fields: { ...base, ...fields } }),
  };
}

/** A logger that drops everything, for tests and library defaults. */
export const silentLogger: Logger = createLogger({ write: () => undefined, level: "error" });

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    const extra = value as Error & { code?: unknown; number?: unknown };
    return { name: value.name, message: value.message, code: extra.code, number: extra.number };
  }
  return value;
}
