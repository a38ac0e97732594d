import assert from "node:assert/strict";
import { ServiceBusError } from "@azure/service-bus";
import { splitArchiveUrl } from "../../src/servicebus/dead-letter-blob-archive.ts";
import { refusalMessage } from "../../src/servicebus/refusal.ts";

describe("a Service Bus refusal names the role the attempt needs (src/servicebus/refusal.ts)", function () {
  it("turns the SDK's UnauthorizedAccess into the role and the Bicep parameter, per attempt", function () {
    const refused = new ServiceBusError(
      "Unauthorized access. 'Send' claim(s) are required to perform this operation.",
      "UnauthorizedAccess",
    );
    assert.match(
      refusalMessage(refused, "replay", "bob@contoso.example")!,
      /^Service Bus refused bob@contoso\.example \(UnauthorizedAccess\): a replay needs Azure Service Bus Data Sender and Data Receiver on the queue \(the Bicep's dlqOperators\); nothing was changed by the refused step\. Unauthorized access\. 'Send' claim/,
    );
    assert.match(
      refusalMessage(refused, "list")!,
      /a list needs Azure Service Bus Data Receiver on the queue \(the Bicep's dlqReaders or dlqOperators\)/,
    );
    assert.match(
      refusalMessage(refused, "purge")!,
      /Storage Blob Data Contributor on the archive \(dlqOperators\)/,
    );
  });

  it("leaves every other error alone", function () {
    assert.equal(refusalMessage(new ServiceBusError("gone", "MessageLockLost"), "purge"), undefined);
    assert.equal(refusalMessage(new Error("UnauthorizedAccess"), "purge"), undefined);
  });
});

describe("an archive URL (splitArchiveUrl)", function () {
  it("splits the container from a path inside it", function () {
    assert.deepEqual(splitArchiveUrl("https://st.blob.core.windows.net/dlq-archive"), {
      containerUrl: "https://st.blob.core.windows.net/dlq-archive",
      prefix: "",
    });
    assert.deepEqual(splitArchiveUrl("https://st.blob.core.windows.net/dlq-archive/notes/2026-12-02/"), {
      containerUrl: "https://st.blob.core.windows.net/dlq-archive",
      prefix: "notes/2026-12-02/",
    });
  });

  it("reads an emulator's path-style URL (an IP address or localhost host: the account first), as the SDK does", function () {
    assert.deepEqual(splitArchiveUrl("https://127.0.0.1:10000/devstoreaccount1/dlq-archive/notes/"), {
      containerUrl: "https://127.0.0.1:10000/devstoreaccount1/dlq-archive",
      prefix: "notes/",
    });
    assert.deepEqual(splitArchiveUrl("https://localhost:10000/devstoreaccount1/dlq-archive"), {
      containerUrl: "https://localhost:10000/devstoreaccount1/dlq-archive",
      prefix: "",
    });
    assert.throws(() => splitArchiveUrl("https://127.0.0.1:10000/devstoreaccount1"), /names no container/);
  });

  it("refuses plain HTTP, a SAS and a URL without a container", function () {
    assert.throws(() => splitArchiveUrl("http://st.blob.core.windows.net/c"), /must be https:\/\//);
    assert.throws(
      () => splitArchiveUrl("https://st.blob.core.windows.net/c?sv=2024&sig=x"),
      /must not carry a query \(a SAS\)/,
    );
    assert.throws(() => splitArchiveUrl("https://st.blob.core.windows.net/"), /names no container/);
    assert.throws(() => splitArchiveUrl("dlq-archive"), /is not a URL/);
  });
});
