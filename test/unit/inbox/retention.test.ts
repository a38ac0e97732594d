import assert from "node:assert/strict";
import { ConfigError } from "../../../src/domain/errors.ts";
import { minimumRetentionMs, validateRetention } from "../../../src/inbox/retention.ts";

const window = { lockDurationMs: 60_000, maxDeliveryCount: 10, messageTimeToLiveMs: 86_400_000 };

describe("inbox retention rule", () => {
  it("the minimum is lock duration x max delivery count + message time to live", () => {
    assert.equal(minimumRetentionMs(window), 60_000 * 10 + 86_400_000);
  });

  it("accepts a retention at or above the minimum", () => {
    assert.doesNotThrow(() => validateRetention(minimumRetentionMs(window), window));
    assert.doesNotThrow(() => validateRetention(7 * 86_400_000, window));
  });

  it("refuses a shorter retention with an error naming every setting involved", () => {
    assert.throws(
      () => validateRetention(minimumRetentionMs(window) - 1, window),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.equal(error.setting, "inbox.retention");
        for (const name of [
          "servicebus.lockDuration",
          "servicebus.maxDeliveryCount",
          "servicebus.messageTimeToLive",
        ]) {
          assert.ok(error.message.includes(name), `message names ${name}: ${error.message}`);
        }
        return true;
      },
    );
  });

  it("uses the caller's setting names and refuses non-positive values", () => {
    const names = {
      retention: "SBINBOX_RETENTION",
      lockDuration: "LOCK",
      maxDeliveryCount: "MAX",
      messageTimeToLive: "TTL",
    };
    assert.throws(() => validateRetention(1, window, names), /SBINBOX_RETENTION: .*LOCK.*MAX.*TTL/);
    assert.throws(
      () => validateRetention(86_400_000_000, { ...window, maxDeliveryCount: 0 }, names),
      /^ConfigError: MAX/,
    );
  });
});
