import assert from "node:assert/strict";
import { runCli } from "../helpers/cli.ts";

/** `sbinbox publish --type --key --body`'s refusals, before any connection: exit 2 naming the option at fault. */
describe("sbinbox publish --type/--key/--body: bad input", function () {
  this.timeout(30_000);
  const cases: [string, string[], RegExp][] = [
    [
      "a body that is not JSON",
      ["--type", "NoteCreated", "--key", "1", "--body", "{noteId: 1}"],
      /--body is not JSON/,
    ],
    ["no key", ["--type", "NoteCreated", "--body", "{}"], /--key is required with --type, --key and --body/],
    ["an empty type", ["--type", "", "--key", "1", "--body", "{}"], /--type is required/],
    [
      "a file as well",
      ["--type", "NoteCreated", "--key", "1", "--body", "{}", "--file", "x"],
      /exactly one of --file, --count and --type/,
    ],
  ];
  for (const [what, args, message] of cases) {
    it(`refuses ${what}`, async function () {
      const result = await runCli(["publish", ...args], {});
      assert.equal(result.code, 2, result.stderr);
      assert.match(result.stderr, message);
    });
  }
});
