import { randomUUID } from "node:crypto";
import { isIP } from "node:net";
import type { TokenCredential } from "@azure/identity";
import type { ContainerClient } from "@azure/storage-blob";
import { archiveRecord, parseArchived, type Archive, type ArchivedMessage } from "./dead-letter-archive.ts";

/**
 * The archive in Azure: a blob container (bicep/modules/archive), written with the operator's own Entra ID identity
 * (the account refuses shared keys). Each run writes under its own prefix, `<entity>/<day>/<run>/`, and each message
 * is one blob named by its place in the run, `000001.json`, created with If-None-Match: * so nothing already archived
 * is ever overwritten. So the file archive's "path and line" holds here too: the blob is `<path><line, 6 digits>.json`.
 * Only once the service has acknowledged the blob (a block blob upload is durable when it returns 201) does the
 * purge complete the message.
 */
export function openBlobArchive(
  container: ContainerClient,
  entity: string,
  operator: string,
  now = () => new Date(),
): Archive {
  const prefix = `${safe(entity)}/${now().toISOString().slice(0, 10)}/${randomUUID()}/`;
  let written = 0;
  return {
    path: `${container.url}/${prefix}`,
    async append(message, info, edit) {
      const record = archiveRecord(message, info, { entity, operator, at: now() }, edit);
      const line = written + 1;
      const text = JSON.stringify(record);
      try {
        await uploadOnce(container, blobName(prefix, line), text);
      } catch (error) {
        throw archiveRefusal(error, container.url, operator, "; nothing was deleted");
      }
      written = line;
      return line;
    },
  };
}

/**
 * Creates the blob, never overwriting one. A 409 is read back before it counts as a refusal: the SDK retries a PUT
 * whose answer was lost (a timeout, a dropped connection), and if the first one landed the retry meets the blob it
 * wrote itself. The same bytes there are this write, done; other bytes are another record, and the purge stops.
 */
async function uploadOnce(container: ContainerClient, name: string, text: string): Promise<void> {
  const blob = container.getBlockBlobClient(name);
  try {
    await blob.upload(text, Buffer.byteLength(text), {
      blobHTTPHeaders: { blobContentType: "application/json" },
      conditions: { ifNoneMatch: "*" },
    });
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode !== 409) throw error;
    const there = await blob.downloadToBuffer().catch(() => undefined);
    if (there === undefined || !there.equals(Buffer.from(text, "utf8"))) throw error;
  }
}

/**
 * The records under a prefix of the container (a run's, a day's, an entity's: whatever the URL names), in the order
 * they were archived (their archivedAt; within a run, by place): listed by name, a day's runs would come in the order
 * of their random run ids instead.
 */
export async function readBlobArchive(
  container: ContainerClient,
  prefix: string,
): Promise<ArchivedMessage[]> {
  const out: ArchivedMessage[] = [];
  try {
    for await (const blob of container.listBlobsFlat({ prefix })) {
      if (!blob.name.endsWith(".json")) continue;
      const text = (await container.getBlockBlobClient(blob.name).downloadToBuffer()).toString("utf8");
      out.push(parseArchived(text, `${container.url}/${blob.name}`));
    }
  } catch (error) {
    throw archiveRefusal(error, container.url, undefined, "");
  }
  // Stable: records of one run (one archivedAt to the millisecond at most) keep their place order from the listing.
  return out.sort((a, b) => Date.parse(a.archivedAt) - Date.parse(b.archivedAt));
}

/**
 * A container client for an archive URL, `https://<account>.blob.core.windows.net/<container>[/<prefix>]`, with the
 * given credential (the operator's own sign-in, lazyOperatorCredential); @azure/storage-blob is loaded only here, so a console on
 * a file archive never loads it. Returns the client and the prefix the URL names inside the container.
 */
export async function containerFromUrl(
  url: string,
  credential: TokenCredential,
): Promise<{ container: ContainerClient; prefix: string }> {
  const { containerUrl, prefix } = splitArchiveUrl(url);
  const { ContainerClient } = await import("@azure/storage-blob");
  return { container: new ContainerClient(containerUrl, credential), prefix };
}

/** `https://host/container/a/b/` as the container's URL and the prefix `a/b/`; anything but https:// is refused. */
export function splitArchiveUrl(url: string): { containerUrl: string; prefix: string } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`the archive URL ${JSON.stringify(url)} is not a URL`);
  }
  if (parsed.protocol !== "https:")
    throw new Error(`the archive URL must be https:// (Entra ID tokens are sent only over TLS); got ${url}`);
  if (parsed.search !== "")
    throw new Error(
      "the archive URL must not carry a query (a SAS): the archive is written with your Entra ID identity",
    );
  const segments = parsed.pathname.replace(/^\//, "").split("/");
  // An IP address or localhost as the host (an emulator such as Azurite, Azure Stack) is path-style: the account is
  // the first segment, as @azure/storage-blob itself reads such a URL (isIpEndpointStyle).
  const account = pathStyle(parsed) ? `/${segments.shift() ?? ""}` : "";
  const [container, ...rest] = segments;
  if (!container) throw new Error(`the archive URL ${url} names no container`);
  return {
    containerUrl: `${parsed.origin}${account}/${container}`,
    prefix: decodeURIComponent(rest.join("/")),
  };
}

function pathStyle(url: URL): boolean {
  return isIP(url.hostname.replace(/^\[|\]$/g, "")) !== 0 || url.hostname === "localhost";
}

function blobName(prefix: string, line: number): string {
  return `${prefix}${String(line).padStart(6, "0")}.json`;
}

function safe(entity: string): string {
  return entity.replace(/[^\w.-]+/g, "_");
}

/**
 * A refusal said plainly: 403 is a missing role (Storage Blob Data Contributor on the container, which the Bicep grants
 * to dlqOperators), 409 a blob that exists already; the message in hand was not deleted either way.
 */
function archiveRefusal(error: unknown, url: string, operator: string | undefined, after: string): Error {
  const e = error as { statusCode?: number; code?: string; message?: string };
  const who = operator === undefined ? "you" : operator;
  if (e.statusCode === 403)
    return new Error(
      `the archive ${url} refused ${who} (403 ${e.code ?? ""}): writing or reading it needs Storage Blob Data ` +
        `Contributor on the container (the Bicep's dlqOperators), or it is reached from outside its network${after}`,
      { cause: error },
    );
  if (e.statusCode === 409)
    return new Error(`the archive ${url} already holds that blob (409 ${e.code ?? ""})${after}`, {
      cause: error,
    });
  return new Error(`the archive ${url} failed: ${e.message ?? String(error)}${after}`, {
    cause: error,
  });
}
