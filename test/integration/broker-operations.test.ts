import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { parseConfig } from "../../src/localbroker/config.ts";
import { repoRoot } from "../../scripts/bicep.ts";
import { useLocalBroker } from "../helpers/broker.ts";
import { managementRequest } from "../helpers/raw-management.ts";

/**
 * The operation names of @azure/core-amqp's `Constants.operations`, read from the SDK's own source (the copy
 * @azure/service-bus resolves), so a newer SDK's operations join the check without an edit here.
 */
async function sdkOperations(): Promise<string[]> {
  const require = createRequire(import.meta.url);
  const fromServiceBus = createRequire(require.resolve("@azure/service-bus"));
  const source = await readFile(
    join(dirname(fromServiceBus.resolve("@azure/core-amqp")), "util/constants.js"),
    "utf8",
  );
  const table = /operations: \{([^}]*)\}/.exec(source)?.[1] ?? "";
  return [...table.matchAll(/:\s*"([^"]+)"/g)].map((m) => m[1]!);
}

/** Names the SDKs' operation table holds that are not Service Bus `$management` requests. */
const NOT_MANAGEMENT: Record<string, string> = {
  "put-token": "CBS, on $cbs: served (any token), checked by every test that connects",
  READ: "Event Hubs' runtime information request; @azure/service-bus never sends it",
};

/**
 * Every `$management` operation the JavaScript SDK's AMQP layer can send (@azure/core-amqp's Constants.operations,
 * which @azure/service-bus and its later versions use) is either served by the local broker or named as not
 * supported in docs/local-broker.md, so that a gap is found here and not by a user.
 */
describe("local broker: each management operation the SDK can send is served or documented as not", () => {
  const fixture = useLocalBroker(
    parseConfig({
      UserConfig: {
        Namespaces: [{ Name: "n", Topics: [{ Name: "t", Subscriptions: [{ Name: "s" }] }] }],
      },
    }),
  );

  it("answers each one other than 'not implemented', or docs/local-broker.md lists it under Not supported", async () => {
    const doc = await readFile(join(repoRoot, "docs/local-broker.md"), "utf8");
    const unsupported = /\*\*Not supported[^*]*\*\*([\s\S]*?)\n\n/.exec(doc)?.[1] ?? "";
    assert.ok(unsupported.length > 0, "docs/local-broker.md has a **Not supported** paragraph");
    const operations = await sdkOperations();
    assert.ok(operations.includes("com.microsoft:renew-lock") && operations.length >= 15, operations.join());
    const served: string[] = [];
    const documented: string[] = [];
    for (const operation of operations) {
      if (operation in NOT_MANAGEMENT) continue;
      const answer = await managementRequest(fixture.broker.port, "t/Subscriptions/s", operation, {});
      const notImplemented =
        answer.condition === "amqp:not-implemented" &&
        /not supported by the local broker/.test(answer.description ?? "");
      if (!notImplemented) served.push(operation);
      else {
        assert.ok(
          unsupported.includes(`\`${operation}\``),
          `${operation} is neither served nor listed under Not supported in docs/local-broker.md`,
        );
        documented.push(operation);
      }
    }
    assert.deepEqual(documented, ["com.microsoft:get-message-sessions"]);
    assert.ok(
      served.includes("com.microsoft:batch-delete-messages") && served.includes("com.microsoft:add-rule"),
    );
  });
});
