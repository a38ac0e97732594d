/**
 * Secrets inside free text (an error message quoting a connection string), masked in each string value of a log
 * record before pino serialises it, so a mask can never cross from one JSON field into the next or break a line's
 * JSON. A key's value may be written the ways ADO.NET allows (`Password="a;b c"`, `'...'`, `{...}`, or bare up to
 * the next `;`); a URL's password runs to the last `@` before the host, since a password may hold an unencoded `@`.
 * A development emulator's key (`UseDevelopmentEmulator=true`, the local broker's) is public and stays readable, so
 * a worker on embedded defaults can log where to publish.
 */
const KEY_VALUE =
  /((?:SharedAccessKey|SharedAccessSignature|AccountKey|Password|Pwd|InstrumentationKey)\s*=\s*)("(?:[^"]|"")*"?|'(?:[^']|'')*'?|\{(?:[^}]|\}\})*\}?|(?![^;]*;\s*UseDevelopmentEmulator\s*=\s*true)[^;]*)/gi;
const URL_USERINFO = /(\b[a-z][\w+.-]*:\/\/[^:/@\s]*:)[^\s/]*@/gi;

export const REDACTED = "[redacted]";

export function maskText(text: string): string {
  return text
    .replace(KEY_VALUE, (_m, key: string, value: string) => (value === "" ? key : `${key}${REDACTED}`))
    .replace(URL_USERINFO, (_m, head: string) => `${head}${REDACTED}@`);
}

/** Name, message and the structured codes only: no stack, and none of the driver's own fields (its config). */
export function serializeError(value: Error): Record<string, unknown> {
  const extra = value as Error & { code?: unknown; number?: unknown };
  return { name: value.name, message: value.message, code: extra.code, number: extra.number };
}

/** Every string in a log record masked, errors reduced to their safe fields; a copy, the caller's objects intact. */
export function maskValue(value: unknown, depth = 0, seen = new WeakSet<object>()): unknown {
  if (typeof value === "string") return maskText(value);
  if (value === null || typeof value !== "object") return value;
  if (Buffer.isBuffer(value) || value instanceof Date) return value;
  if (depth > 8 || seen.has(value)) return "[omitted]";
  seen.add(value);
  let copy: unknown;
  if (value instanceof Error) copy = maskValue(serializeError(value), depth + 1, seen);
  else if (Array.isArray(value)) copy = value.map((item) => maskValue(item, depth + 1, seen));
  else {
    const fields: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) fields[key] = maskValue(item, depth + 1, seen);
    copy = fields;
  }
  seen.delete(value);
  return copy;
}
