/** The schema the inbox's tables live in when none is configured: each dialect's own default. */
export const DEFAULT_INBOX_SCHEMA = { sqlserver: "dbo", postgres: "public" } as const;

/**
 * A schema name the statements can embed: a regular identifier (letter or underscore, then letters, digits,
 * underscores; at most 63 characters, PostgreSQL's limit). Schema names cannot be bound as parameters, so this
 * check, and the quoting on top of it, is what keeps them from being SQL.
 */
export const INBOX_SCHEMA_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

export function checkSchemaName(schema: string): string {
  if (!INBOX_SCHEMA_PATTERN.test(schema))
    throw new Error(
      `inbox schema "${schema}" is not a plain identifier (a letter or _, then letters, digits or _, at most 63)`,
    );
  return schema;
}

/** A session lock's name within one inbox (its schema), so inboxes in one database never share a lock. */
export function sessionLockName(schema: string, name: string): string {
  return `sbinbox:${schema}:${name}`;
}
