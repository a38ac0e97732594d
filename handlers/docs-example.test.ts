// The project's check that README.md and docs/handlers.md show this module's code as it is: each ```ts block after
// a `<!-- mirrors handlers/<file> -->` line is cut at its blank lines, and each piece must be lines of that file,
// in order, indentation aside. The notes' own tests (notes.test.ts) run the code, so the docs show code that runs.
// It is about the notes example only: delete it with them when you replace handlers/ with your module.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const MARKER = /<!-- mirrors (handlers\/[\w./-]+) -->\n```ts\n([\s\S]*?)```/g;

interface Mirror {
  doc: string;
  file: string;
  pieces: string[][];
}

function mirrors(doc: string): Mirror[] {
  const markdown = readFileSync(root + doc, "utf8");
  return [...markdown.matchAll(MARKER)].map(([, file, block]) => ({
    doc,
    file: file!,
    pieces: block!
      .split(/\n\s*\n/)
      .map((piece) => piece.split("\n").map((line) => line.trim()))
      .map((lines) => lines.filter((line) => line !== ""))
      .filter((lines) => lines.length > 0),
  }));
}

/** The line at which `piece` starts in `lines` (each trimmed), or -1. */
function indexOfPiece(lines: string[], piece: string[]): number {
  for (let at = 0; at + piece.length <= lines.length; at++)
    if (piece.every((line, i) => lines[at + i] === line)) return at;
  return -1;
}

describe("the docs' notes example is handlers/'s code", () => {
  const all = ["README.md", "docs/handlers.md"].flatMap(mirrors);

  it("README.md and docs/handlers.md mirror the module's files", () => {
    const named = (doc: string) => all.filter((m) => m.doc === doc).map((m) => m.file);
    assert.deepEqual(named("README.md"), ["handlers/statements.ts", "handlers/notes.ts"]);
    assert.deepEqual(named("docs/handlers.md"), [
      "handlers/statements.ts",
      "handlers/notes.ts",
      "handlers/index.ts",
      "handlers/notes.test.ts",
      "handlers/notes.test.ts",
    ]);
  });

  for (const mirror of all)
    it(`${mirror.doc}'s block of ${mirror.file} is lines of that file`, () => {
      const lines = readFileSync(root + mirror.file, "utf8")
        .split("\n")
        .map((line) => line.trim());
      for (const piece of mirror.pieces)
        assert.notEqual(
          indexOfPiece(lines, piece),
          -1,
          `${mirror.doc} shows lines that ${mirror.file} does not have, in this order:\n${piece.join("\n")}`,
        );
    });
});
