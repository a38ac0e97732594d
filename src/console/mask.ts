/** What a masked field's value becomes. */
export const PERSONAL = "[personal]";

/**
 * A body with the fields a handler marks personal (dotted paths) replaced by PERSONAL, for a console that shows
 * bodies to whoever has the page. A body that is not JSON while its type has personal fields is hidden whole: its
 * fields cannot be told apart.
 */
export function maskBody(
  body: string,
  personal: readonly string[] | undefined,
): { body: string; masked: boolean } {
  if (!personal || personal.length === 0) return { body, masked: false };
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return { body: `${PERSONAL} (not JSON: hidden whole, its type has personal fields)`, masked: true };
  }
  let masked = false;
  for (const path of personal) masked = maskPath(value, path.split(".")) || masked;
  return { body: JSON.stringify(value), masked };
}

function maskPath(value: unknown, path: readonly string[]): boolean {
  if (value === null || typeof value !== "object") return false;
  // Through arrays: "lines.email" masks every line's email.
  if (Array.isArray(value)) return value.map((item) => maskPath(item, path)).some(Boolean);
  const [head, ...rest] = path;
  const record = value as Record<string, unknown>;
  if (head === undefined || !Object.hasOwn(record, head)) return false;
  if (rest.length === 0) {
    record[head] = PERSONAL;
    return true;
  }
  return maskPath(record[head], rest);
}
