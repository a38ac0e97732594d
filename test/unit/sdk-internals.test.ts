import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { localConnectionString } from "../../src/localbroker/broker.ts";
import { lockRenewerOf } from "../../src/servicebus/settlement-guard.ts";

/**
 * The settlement guard stops a stale lock renewal through the SDK's internal `_streamingReceiver._lockRenewer`
 * (src/servicebus/settlement-guard.ts). An @azure/service-bus upgrade that moves it fails here, not silently in
 * production (where the guard then warns once and counts sbinbox.servicebus.renewal_stop_missing).
 */
describe("the installed @azure/service-bus has the internals the settlement guard reads", function () {
  // Nothing listens on port 1: subscribe builds its receiver synchronously, and its connect attempts fail.
  const client = new ServiceBusClient(localConnectionString(1));
  after(() => client.close());

  it("a subscribed receiver with renewal has _streamingReceiver._lockRenewer.stop(entity, message), keyed by link name", async () => {
    const receiver = client.createReceiver("sbinbox", { maxAutoLockRenewalDurationInMs: 60_000 });
    const subscription = receiver.subscribe({ processMessage: async () => {}, processError: async () => {} });
    try {
      const renewer = lockRenewerOf(receiver) as
        { stop?: unknown; _messageRenewLockTimers?: unknown } | null | undefined;
      assert.ok(renewer, "the lock renewer is where the guard reads it");
      assert.equal(typeof renewer.stop, "function");
      assert.equal((renewer.stop as (...args: unknown[]) => unknown).length, 2, "stop(linkEntity, message)");
      assert.ok(renewer._messageRenewLockTimers instanceof Map, "renewals kept per link name");
      // What QueueReceiver.receiveLinkOpen reads for the refused readiness (src/servicebus/receiver.ts).
      const streaming = (receiver as unknown as { _streamingReceiver?: { isOpen?: () => boolean } })
        ._streamingReceiver;
      assert.equal(typeof streaming?.isOpen, "function");
      assert.equal(streaming?.isOpen?.(), false, "not open: nothing listens");
    } finally {
      await subscription.close();
      await receiver.close();
    }
  });

  it("without renewal the field is there and empty: the guard has nothing to stop, and does not warn", async () => {
    const receiver = client.createReceiver("sbinbox", { maxAutoLockRenewalDurationInMs: 0 });
    const subscription = receiver.subscribe({ processMessage: async () => {}, processError: async () => {} });
    try {
      assert.equal(lockRenewerOf(receiver), null);
    } finally {
      await subscription.close();
      await receiver.close();
    }
  });
});
