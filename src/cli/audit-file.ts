import { closeSync, constants, fsyncSync, openSync, writeSync } from "node:fs";

export interface AuditFile {
  readonly path: string;
  /** Appends one JSON line and fsyncs it; throws when it cannot (the caller decides whether to go on). */
  write(record: Record<string, unknown>): void;
  close(): void;
}

/**
 * An append-only JSON-lines audit file: opened O_APPEND (created 0600; every line goes to the end, whoever else
 * appends), each line written whole and fsync'ed before the call returns, so a line the caller saw written survives
 * a crash or a power cut. Lines carry the time, the operator, MessageIds and sequence numbers, never a body.
 * Written here on node:fs rather than through pino's destination (sonic-boom, which can write sync and fsync): it
 * reports a failed write as an 'error' event after the call, and a plan must not go on past an audit line that was
 * not written; here the write throws, in the call that asked for it.
 */
export function openAuditFile(path: string, now: () => Date = () => new Date()): AuditFile {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT, 0o600);
  } catch (error) {
    throw new Error(`cannot open the audit file ${path}: ${(error as Error).message}`, { cause: error });
  }
  return {
    path,
    write(record) {
      const bytes = Buffer.from(`${JSON.stringify({ time: now().toISOString(), ...record })}\n`);
      for (let at = 0; at < bytes.length;) {
        const written = writeSync(fd, bytes, at, bytes.length - at);
        if (written <= 0) throw new Error(`writing the audit file ${path}: wrote nothing`);
        at += written;
      }
      fsyncSync(fd);
    },
    close() {
      closeSync(fd);
    },
  };
}
