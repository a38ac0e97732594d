import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, normalize, relative, sep } from "node:path";
import ts from "typescript";

// The import rules docs/architecture.md states, checked on every import of every file under src/: static imports,
// `export ... from`, and dynamic `import("...")` with a literal name. A rule changed here is changed there too.

const SRC = join(import.meta.dirname, "../../src");

interface Import {
  readonly file: string; // relative to src/, with "/"
  readonly spec: string;
  readonly typeOnly: boolean;
  /** The imported file, relative to src/, for a relative import. */
  readonly target?: string;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

function importsOf(path: string): Import[] {
  const file = relative(SRC, path).split(sep).join("/");
  const source = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true);
  const found: Import[] = [];
  const add = (spec: string, typeOnly: boolean): void => {
    const target = spec.startsWith(".")
      ? relative(SRC, normalize(join(dirname(path), spec)))
          .split(sep)
          .join("/")
      : undefined;
    found.push({ file, spec, typeOnly, target });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const clause = node.importClause;
      const typeOnly =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            clause.namedBindings !== undefined &&
            ts.isNamedImports(clause.namedBindings) &&
            clause.namedBindings.elements.length > 0 &&
            clause.namedBindings.elements.every((e) => e.isTypeOnly)));
      add(node.moduleSpecifier.text, typeOnly);
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      const typeOnly =
        node.isTypeOnly ||
        (node.exportClause !== undefined &&
          ts.isNamedExports(node.exportClause) &&
          node.exportClause.elements.every((e) => e.isTypeOnly));
      add(node.moduleSpecifier.text, typeOnly);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined
    ) {
      const arg = node.arguments[0];
      if (ts.isStringLiteralLike(arg)) add(arg.text, false);
      else computed.push(file);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      const literal = node.argument.literal;
      if (ts.isStringLiteral(literal)) add(literal.text, true);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** The files with an import() of a computed name (a module found at run time), which no rule here can check. */
const computed: string[] = [];
const imports = sourceFiles(SRC).flatMap(importsOf);
const files = new Set(sourceFiles(SRC).map((p) => relative(SRC, p).split(sep).join("/")));

/** A file's area: its folder under src/, or "(root)" for the entry files directly under src/. */
function area(file: string): string {
  return file.includes("/") ? file.slice(0, file.indexOf("/")) : "(root)";
}

function packageOf(spec: string): string {
  const parts = spec.split("/");
  return spec.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}

/** Which other areas each area may import (docs/architecture.md, "Code map"); the entry files under src/ any. */
const MAY_IMPORT: Record<string, readonly string[]> = {
  domain: [],
  http: [],
  embedded: [],
  localbroker: [],
  testing: [],
  telemetry: ["domain"],
  inbox: ["domain", "telemetry"],
  servicebus: ["domain", "telemetry"],
  config: ["domain", "inbox", "outbox"],
  example: ["domain", "servicebus"],
  worker: ["domain", "inbox", "servicebus", "telemetry"],
  outbox: ["config", "domain", "http", "inbox", "servicebus", "telemetry"],
  console: ["outbox", "servicebus"],
  app: [
    "config",
    "domain",
    "embedded",
    "example",
    "http",
    "inbox",
    "outbox",
    "servicebus",
    "telemetry",
    "worker",
  ],
  cli: [
    "app",
    "config",
    "console",
    "domain",
    "example",
    "http",
    "inbox",
    "outbox",
    "servicebus",
    "telemetry",
  ],
};

/**
 * The stated exceptions to MAY_IMPORT, by file. telemetry/inbox-tracing.ts wraps the inbox's driver and store in
 * spans, so it reads the inbox's types and SQL Server's error numbers, while the inbox's adapters call it.
 */
const EXCEPTIONS: Record<string, readonly string[]> = {
  "telemetry/inbox-tracing.ts": ["inbox"],
};

/** Which areas may import a package at run time; a type-only import is allowed where TYPE_ONLY says. */
const PACKAGES: Record<string, readonly string[]> = {
  "@azure/service-bus": ["servicebus"],
  mssql: ["inbox", "outbox", "app/database-sqlserver.ts", "cli/migrate.ts"],
  pg: ["inbox", "outbox", "embedded", "app/database-postgres.ts", "app/demo-upstream.ts"],
  tedious: ["inbox"],
  rhea: ["localbroker"],
};
const TYPE_ONLY: Record<string, readonly string[]> = {
  "@azure/service-bus": ["console/service.ts"],
};

function allowed(where: readonly string[], file: string): boolean {
  return where.some((w) => (w.endsWith(".ts") ? file === w : area(file) === w));
}

/** Tarjan's strongly connected components of the file graph; the ones of more than one file are cycles. */
function cycles(): string[][] {
  const edges = new Map<string, string[]>();
  for (const i of imports) {
    if (i.target !== undefined && files.has(i.target))
      edges.set(i.file, [...(edges.get(i.file) ?? []), i.target]);
  }
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const connect = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (edges.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const f of files) if (!index.has(f)) connect(f);
  return found;
}

describe("architecture: the import rules of docs/architecture.md", () => {
  it("reads the imports of every file under src/, static and dynamic", () => {
    assert.ok(files.size > 100, `only ${files.size} files found under ${SRC}`);
    assert.ok(
      imports.some((i) => i.file === "app/database.ts" && i.spec === "./database-postgres.ts" && !i.typeOnly),
      "the dynamic import of database-postgres.ts in app/database.ts was not seen",
    );
    // The handler module, named by SBINBOX_HANDLER_MODULE, is the one module found at run time.
    assert.deepEqual([...new Set(computed)], ["app/handler-module.ts"], "import() of a computed name");
    for (const i of imports.filter((i) => i.target !== undefined)) {
      assert.ok(files.has(i.target!), `${i.file}: imports ${i.spec}, which is not a file under src/`);
    }
  });

  it("each area imports only the areas the code map allows", () => {
    for (const name of new Set([...files].map(area))) {
      assert.ok(
        name === "(root)" || name in MAY_IMPORT,
        `src/${name}/ is not in the code map (docs/architecture.md and MAY_IMPORT)`,
      );
    }
    const broken = imports
      .filter((i) => i.target !== undefined && area(i.target) !== area(i.file) && area(i.file) !== "(root)")
      .filter((i) => !MAY_IMPORT[area(i.file)]!.includes(area(i.target!)))
      .filter((i) => !(EXCEPTIONS[i.file] ?? []).includes(area(i.target!)))
      .map((i) => `src/${i.file} imports ${i.spec} (${area(i.file)} may not import ${area(i.target!)})`);
    assert.deepEqual(broken, []);
  });

  it("only the allowed areas import @azure/service-bus and the database drivers", () => {
    const broken = imports
      .filter((i) => i.target === undefined && packageOf(i.spec) in PACKAGES)
      .filter((i) => {
        const pkg = packageOf(i.spec);
        return !allowed(PACKAGES[pkg]!, i.file) && !(i.typeOnly && allowed(TYPE_ONLY[pkg] ?? [], i.file));
      })
      .map((i) => `src/${i.file} imports ${i.spec}${i.typeOnly ? " (types only)" : ""}`);
    assert.deepEqual(broken, []);
  });

  it("the domain layer imports no I/O: no Node built-in and no package but zod's types", () => {
    const broken = imports
      .filter((i) => area(i.file) === "domain" && i.target === undefined)
      .filter((i) => !(i.spec === "zod" && i.typeOnly))
      .map((i) => `src/${i.file} imports ${i.spec}`);
    assert.deepEqual(broken, []);
  });

  it("no import cycle between files", () => {
    assert.deepEqual(cycles(), [], "files that import each other, directly or through others");
  });
});
