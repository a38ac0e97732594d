import { closeSync, constants, fstatSync, fsyncSync, openSync, readSync, writeSync } from "node:fs";

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
    fd = openSync(path, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT, 0o600);
  } catch (error) {
    throw new Error(`cannot open the audit file ${path}: ${(error as Error).message}`, { cause: error });
  }
  let torn: boolean;
  try {
    torn = checkFile(fd, path);
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  return {
    path,
    write(record) {
      // After a torn line (a write cut off, or a file left so by a crash) the next line starts on its own.
      const line = `${torn ? "\n" : ""}${JSON.stringify({ time: now().toISOString(), ...record })}\n`;
      const bytes = Buffer.from(line);
      let at = 0;
      try {
        while (at < bytes.length) {
          const written = writeSync(fd, bytes, at, bytes.length - at);
          if (written <= 0) throw new Error(`writing the audit file ${path}: wrote nothing`);
          at += written;
        }
        fsyncSync(fd);
      } catch (error) {
        if (at > 0) torn = true;
        throw error;
      }
      torn = false;
    },
    close() {
      closeSync(fd);
    },
  };
}

/**
 * Refuses an audit file others may read or write (an existing file keeps its mode: O_CREAT's 0600 is for a new one
 * only), or one that is not a regular file. Says whether it ends mid-line.
 */
function checkFile(fd: number, path: string): boolean {
  const stat = fstatSync(fd);
  if (!stat.isFile()) throw new Error(`the audit file ${path} is not a regular file`);
  if ((stat.mode & 0o077) !== 0)
    throw new Error(
      `the audit file ${path} is mode ${(stat.mode & 0o777).toString(8)}: others may read or write it; chmod 600 it`,
    );
  if (stat.size === 0) return false;
  const last = Buffer.alloc(1);
  readSync(fd, last, 0, 1, stat.size - 1);
  return last[0] !== 0x0a;
}
