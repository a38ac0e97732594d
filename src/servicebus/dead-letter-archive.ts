import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import type { ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSender } from "@azure/service-bus";
import { CopyProperty } from "../domain/envelope.ts";
import type { DeadLetter } from "./dead-letter.ts";
import { restoreMessageId } from "./message-id.ts";

/** One purged dead letter as the archive keeps it: everything needed to send it again. */
export interface ArchivedMessage {
  readonly archivedAt: string;
  readonly entity: string;
  readonly operator: string;
  readonly sequenceNumber: string;
  readonly messageId: string;
  readonly inboxKey: string;
  readonly replay: number;
  readonly reason?: string;
  readonly description?: string;
  readonly enqueuedTime?: string;
  /** Base64: a body is bytes, whatever it holds. */
  readonly body: string;
  readonly contentType?: string;
  readonly subject?: string;
  readonly correlationId?: string;
  readonly sessionId?: string;
  readonly partitionKey?: string;
  /** Dates become ISO strings here (JSON): a restored copy carries them as strings. */
  readonly applicationProperties: Record<string, unknown>;
  /** Archived by an edit-and-retry (the original, before it was completed), with the body sent instead, base64. */
  readonly editedBody?: string;
}

export interface Archive {
  /** Where the lines go. */
  readonly path: string;
  /**
   * Appends the message (with an edit's new body) and flushes it to disk; only then may the caller delete it from
   * Service Bus. Returns the line it was written to (1-based), for the audit.
   */
  append(
    message: ServiceBusReceivedMessage,
    info: DeadLetter,
    edit?: { readonly editedBody: Buffer },
  ): number | Promise<number>;
}

/**
 * A JSON-lines file per entity and day under `dir`. Each line is written and fsync'ed before the purge completes
 * the message, so a purge that dies half-way has archived at least what it removed (perhaps one more). The bodies
 * are unmasked (a restore needs them whole), so the directory is the operator's alone (0700, files 0600), and one
 * that others may read or write is refused rather than used.
 */
export function openArchive(dir: string, entity: string, operator: string, now = () => new Date()): Archive {
  ensurePrivateDir(dir);
  const known = { size: -1, lines: 0 };
  const path = join(dir, `${entity.replace(/[^\w.-]+/g, "_")}-${now().toISOString().slice(0, 10)}.jsonl`);
  return {
    path,
    append(message, info, edit) {
      const record = archiveRecord(message, info, { entity, operator, at: now() }, edit);
      return appendDurably(dir, path, `${JSON.stringify(record)}\n`, known);
    },
  };
}

/** The record a file or blob archive keeps of one message: everything needed to send it again. */
export function archiveRecord(
  message: ServiceBusReceivedMessage,
  info: DeadLetter,
  by: { readonly entity: string; readonly operator: string; readonly at: Date },
  edit?: { readonly editedBody: Buffer },
): ArchivedMessage {
  return {
    archivedAt: by.at.toISOString(),
    entity: by.entity,
    operator: by.operator,
    sequenceNumber: info.sequenceNumber,
    messageId: info.messageId,
    inboxKey: info.inboxKey,
    replay: info.replay,
    reason: info.reason,
    description: info.description,
    enqueuedTime: info.enqueuedTime?.toISOString(),
    body: bodyBytes(message.body).toString("base64"),
    contentType: message.contentType,
    subject: message.subject,
    correlationId: message.correlationId === undefined ? undefined : String(message.correlationId),
    sessionId: message.sessionId,
    partitionKey: message.partitionKey,
    applicationProperties: { ...message.applicationProperties },
    ...(edit ? { editedBody: edit.editedBody.toString("base64") } : {}),
  };
}

/** One archived record from its JSON text; `where` names it in the error when it is not one. */
export function parseArchived(text: string, where: string): ArchivedMessage {
  try {
    const record = JSON.parse(text) as ArchivedMessage;
    if (typeof record.messageId !== "string" || typeof record.body !== "string")
      throw new Error("not a record");
    return record;
  } catch (error) {
    throw new Error(`${where} is not an archived message: ${(error as Error).message}`);
  }
}

/** Creates `dir` 0700, or checks an existing one gives group and others no access (the bodies are unmasked). */
function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const mode = statSync(dir).mode & 0o777;
  if ((mode & 0o077) !== 0)
    throw new Error(
      `the archive directory ${dir} is open to others (mode ${mode.toString(8).padStart(3, "0")}): it holds ` +
        `unmasked bodies; run chmod 700 on it or choose another --archive-dir`,
    );
}

/**
 * Appends `line` and fsyncs it; a file created now (0600) has its directory fsync'ed too, so its entry survives a
 * crash. A short write is finished, never taken as done. Returns its line number: counted from the file when its
 * size is not what this archive last left (another console or CLI appended meanwhile), else carried on.
 */
function appendDurably(
  dir: string,
  path: string,
  line: string,
  known: { size: number; lines: number },
): number {
  let created = false;
  let fd: number;
  try {
    fd = openSync(
      path,
      constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_EXCL,
      0o600,
    );
    created = true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    fd = openSync(path, constants.O_WRONLY | constants.O_APPEND);
  }
  try {
    const size = fstatSync(fd).size;
    if (size !== known.size) {
      known.lines = size === 0 ? 0 : readFileSync(path).toString("utf8").split("\n").length - 1;
      known.size = size;
    }
    const bytes = Buffer.from(line);
    for (let at = 0; at < bytes.length;) {
      const written = writeSync(fd, bytes, at, bytes.length - at);
      if (written <= 0) throw new Error(`writing ${path}: wrote nothing of ${bytes.length - at} bytes`);
      at += written;
    }
    fsyncSync(fd);
    known.size += bytes.length;
    known.lines += 1;
  } finally {
    closeSync(fd);
  }
  if (created) syncDir(dir);
  return known.lines;
}

function syncDir(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The archived messages in a file; a line that is not one (a torn last line) is named in the error. */
export function readArchive(path: string): ArchivedMessage[] {
  const lines = readFileSync(path, "utf8").split("\n");
  const out: ArchivedMessage[] = [];
  lines.forEach((line, i) => {
    if (line.trim() !== "") out.push(parseArchived(line, `${path} line ${i + 1}`));
  });
  return out;
}

/**
 * Sends an archived message back to its queue as a replay copy: the next replay number and the original inbox key,
 * as `sbinbox dlq replay` would have, so a restore can never apply an effect a second time, under a MessageId of the
 * restore's own (restoreMessageId: the replay's may have been sent within the duplicate window, and the copy
 * dropped). Returns the copy's MessageId.
 */
export async function restoreArchived(sender: ServiceBusSender, record: ArchivedMessage): Promise<string> {
  const replay = record.replay + 1;
  const copyId = restoreMessageId(record.inboxKey, replay, record);
  const applicationProperties: Record<string, number | boolean | string | Date | null> = {};
  for (const [name, value] of Object.entries(record.applicationProperties))
    if (!["DeadLetterReason", "DeadLetterErrorDescription", CopyProperty.claimId].includes(name))
      applicationProperties[name] = value as string;
  Object.assign(applicationProperties, {
    [CopyProperty.originalKey]: record.inboxKey,
    [CopyProperty.attempt]: 1,
    [CopyProperty.replay]: replay,
  });
  const copy: ServiceBusMessage = {
    messageId: copyId,
    body: Buffer.from(record.body, "base64"),
    contentType: record.contentType,
    subject: record.subject,
    correlationId: record.correlationId,
    sessionId: record.sessionId,
    partitionKey: record.partitionKey,
    applicationProperties,
  };
  await sender.sendMessages(copy);
  return copyId;
}

function bodyBytes(body: unknown): Buffer {
  if (Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body);
  return Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
}
