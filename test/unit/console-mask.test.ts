import assert from "node:assert/strict";
import { z } from "zod";
import { maskBody, PERSONAL } from "../../src/console/mask.ts";
import { checkHandler } from "../../src/domain/handler-module.ts";

describe("console: a handler's personal fields masked in the bodies the console shows", function () {
  it("masks dotted paths, through arrays, and leaves the rest as it was", function () {
    const body = JSON.stringify({
      order: 7,
      customer: { email: "a@b.c", name: "Ann" },
      lines: [{ note: "x" }, { note: "y" }],
    });
    const { body: shown, masked } = maskBody(body, ["customer.email", "lines.note", "absent.field"]);
    assert.equal(masked, true);
    assert.deepEqual(JSON.parse(shown), {
      order: 7,
      customer: { email: PERSONAL, name: "Ann" },
      lines: [{ note: PERSONAL }, { note: PERSONAL }],
    });
  });

  it("hides a body that is not JSON whole when its type has personal fields, and shows any body of a type without", function () {
    assert.match(maskBody("email=a@b.c", ["email"]).body, /^\[personal\] \(not JSON/);
    assert.deepEqual(maskBody("email=a@b.c", undefined), { body: "email=a@b.c", masked: false });
    assert.deepEqual(maskBody('{"a":1}', ["b"]), { body: '{"a":1}', masked: false });
  });

  it("refuses a handler whose personal is not a list of field paths", function () {
    const base = { kind: "transactional", type: "T", schema: z.object({}), handle: () => Promise.resolve() };
    assert.doesNotThrow(() => checkHandler({ ...base, personal: ["customer.email"] }));
    assert.throws(
      () => checkHandler({ ...base, personal: "email" }),
      /handler "T" has personal that is not a list/,
    );
    assert.throws(() => checkHandler({ ...base, personal: [""] }), /not a list of field paths/);
  });
});
