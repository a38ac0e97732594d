import { hash } from "node:crypto";

/**
 * The namespace under which sbinbox derives MessageIds. Generated once, at random, and fixed forever:
 * changing it would change every id and defeat duplicate detection across a deployment.
 */
export const MESSAGE_ID_NAMESPACE = "f5dfdc27-9e31-4822-becc-050e35acb0fa";

/** RFC 9562 namespaces, for tests against the RFC's own examples. */
export const DNS_NAMESPACE = "6ba7b810-9dad-11d1-80b4-00c04fd430c8";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Names up to this many UTF-16 units are encoded into one reused buffer behind the namespace's bytes (at most 3
 * UTF-8 bytes a unit), so an id allocates no buffer of its own; a longer name gets a buffer of its own.
 */
const SCRATCH_UNITS = 1024;
const scratch = Buffer.allocUnsafe(16 + 3 * SCRATCH_UNITS);
const sbinboxNamespace = Buffer.from(MESSAGE_ID_NAMESPACE.replaceAll("-", ""), "hex");

/** The hex digit of the variant nibble ("10" in its top bits), by the digest's nibble. */
const VARIANT = "89ab89ab89ab89ab";

/**
 * UUID version 5 (RFC 9562 section 5.5): SHA-1 of the namespace's 16 bytes followed by the name's UTF-8, its first
 * 16 bytes with the version nibble set to 5 and the variant bits to "10", in lower-case 8-4-4-4-12 form.
 *
 * Written here on node:crypto's one-shot `hash` rather than taken from the `uuid` package, whose v5 gave the same
 * ids (test/unit/message-id-vectors.test.ts keeps ids computed with it) at 3.5 to 6 µs of CPU an id against 1 to
 * 1.6 µs here: uuid encodes the name through encodeURIComponent/unescape into a fresh array, copies it behind the
 * namespace, and formats the digest byte by byte; this writes the name into a reused buffer and cuts the digest's
 * hex. A name that is not well-formed UTF-16 (a lone surrogate) has no UTF-8 encoding and is refused, as uuid's
 * encodeURIComponent refused it, rather than hashed as U+FFFD.
 */
function v5(name: string | Uint8Array, namespace: Buffer): string {
  let data: Buffer;
  if (typeof name !== "string") {
    data = Buffer.concat([namespace, name]);
  } else {
    if (!(name as unknown as { isWellFormed(): boolean }).isWellFormed()) {
      throw new TypeError(`name ${JSON.stringify(name)} has a lone surrogate, which UTF-8 cannot encode`);
    }
    if (name.length <= SCRATCH_UNITS) {
      namespace.copy(scratch, 0);
      data = scratch.subarray(0, 16 + scratch.write(name, 16, "utf8"));
    } else {
      data = Buffer.concat([namespace, Buffer.from(name, "utf8")]);
    }
  }
  return formatDigest(hash("sha1", data, "hex"));
}

/** A SHA-1 digest's hex as a version 5 UUID: its first 16 bytes, version nibble 5, variant bits "10". */
function formatDigest(hex: string): string {
  return (
    `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-` +
    `${VARIANT[parseInt(hex[16]!, 16)]}${hex.slice(17, 20)}-${hex.slice(20, 32)}`
  );
}

/**
 * The sbinbox namespace's own scratch buffer, its 16 bytes written once, and one view of it per length of name
 * (at most 16 + 3 x SCRATCH_UNITS of them, made as names of that length first come): an id then costs neither the
 * namespace's copy nor a new Buffer object for the view. Safe because `hash` reads the view synchronously.
 */
const sbinboxScratch = Buffer.allocUnsafe(16 + 3 * SCRATCH_UNITS);
sbinboxNamespace.copy(sbinboxScratch, 0);
const sbinboxViews: Buffer[] = [];

/** `v5` under the sbinbox namespace of a name already known to be well-formed (`canonicalName` checked it). */
function sbinboxV5WellFormed(name: string): string {
  if (name.length > SCRATCH_UNITS) return v5(name, sbinboxNamespace);
  const length = 16 + sbinboxScratch.write(name, 16, "utf8");
  const data = (sbinboxViews[length] ??= sbinboxScratch.subarray(0, length));
  return formatDigest(hash("sha1", data, "hex"));
}

/** UUID version 5 of `name` (a string is encoded as UTF-8) in any namespace, given as a UUID string. */
export function uuidV5(name: string | Uint8Array, namespace: string): string {
  if (!UUID.test(namespace)) throw new TypeError(`namespace "${namespace}" is not a UUID`);
  return v5(name, Buffer.from(namespace.replaceAll("-", ""), "hex"));
}

/** `uuidV5` under the sbinbox namespace. */
function sbinboxV5(name: string): string {
  return v5(name, sbinboxNamespace);
}

/**
 * The canonical name of an event is `<type>:<key>` encoded as UTF-8, taken exactly as given (no trimming, no case
 * folding, no Unicode normalisation). The type must not contain ":" so the split is unambiguous; the key may.
 * Neither may hold a lone surrogate, which has no UTF-8 encoding.
 */
export function canonicalName(type: string, key: string): string {
  if (type.length === 0) throw new TypeError("event type must not be empty");
  if (type.includes(":")) throw new TypeError(`event type "${type}" must not contain ":"`);
  if (key.length === 0) throw new TypeError("business key must not be empty");
  const name = `${type}:${key}`;
  if (!(name as unknown as { isWellFormed(): boolean }).isWellFormed()) {
    const which = (type as unknown as { isWellFormed(): boolean }).isWellFormed()
      ? "business key"
      : "event type";
    throw new TypeError(`${which} has a lone surrogate (not valid Unicode text, no UTF-8 encoding)`);
  }
  return name;
}

/** The MessageId of an event: the same for every retry and every process that publishes it. */
export function deriveMessageId(type: string, key: string): string {
  return sbinboxV5WellFormed(canonicalName(type, key));
}

/**
 * The MessageId of a scheduled retry's copy: derived from the original's inbox key, its replay number and the
 * attempt, so the same retry scheduled twice is dropped by duplicate detection and every other one passes.
 */
export function retryMessageId(inboxKey: string, replay: number, attempt: number): string {
  return sbinboxV5(`retry\n${inboxKey}\n${replay}\n${attempt}`);
}

/**
 * The MessageId of the `replay`th copy an operator replays from the dead-letter queue: a replay re-run after a crash
 * sends the same id (dropped by the broker if the first got through), a later replay a new one.
 */
export function replayMessageId(inboxKey: string, replay: number): string {
  return sbinboxV5(`replay\n${inboxKey}\n${replay}`);
}

/**
 * The MessageId of an edit-and-retry's copy: the dead letter's inbox key, the replay number and the SHA-256 of the
 * edited body. Not the replay's: a replay of the same dead letter may have sent `replayMessageId(key, replay)`
 * already (its original then not completed), and duplicate detection would drop the edit. The same edit sent again
 * (a lock lost after the send, a re-run) gets the same id and is dropped; another body gets another.
 */
export function editMessageId(inboxKey: string, replay: number, bodySha256: string): string {
  return sbinboxV5(`edit\n${inboxKey}\n${replay}\n${bodySha256}`);
}

/**
 * The MessageId of a restore's copy: the archived record's inbox key and replay number, and which dead letter it is
 * (the entity and sequence number it was purged from). Not the replay's: the edit or replay that archived it, or a
 * replay of it before, may have sent that id within the duplicate window. The same record restored again gets the
 * same id (a resend after a lost ack is dropped), and so do two records of one dead letter (a purge that crashed
 * between the archive write and the delete, then archived it again): not the archive time, which differs between
 * them, so duplicate detection drops the second copy as it would a resend.
 */
export function restoreMessageId(
  inboxKey: string,
  replay: number,
  record: { readonly entity: string; readonly sequenceNumber: string },
): string {
  return sbinboxV5(`restore\n${inboxKey}\n${replay}\n${record.entity}\n${record.sequenceNumber}`);
}
