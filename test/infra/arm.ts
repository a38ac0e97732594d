/**
 * Compiles the Bicep with the pinned CLI and walks the ARM JSON it produces, nested module templates included, so
 * tests can assert on what Azure will actually receive. A template or parameters file is compiled once for all the
 * test processes of the checkout (the files of a run, and a second run beside it): the first compiles it under a
 * lock, the others read its output, kept under node_modules/.cache by the hash of every Bicep source it could
 * include and of the environment variables they read. So no two Bicep CLIs (each a .NET process compiling every
 * module) compete for the cores, and each compile is done once however many copies of the suite run.
 */
import { createHash } from "node:crypto";
import { globSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rename, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { placeholderDeployEnv, repoRoot, runBicep, type BicepResult } from "../../scripts/bicep.ts";
import { withRepoLock } from "../helpers/repo-lock.ts";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export interface ArmResource {
  /** Symbolic name (language version 2.0) or index. */
  symbol: string;
  type: string;
  name: string;
  existing: boolean;
  raw: JsonObject;
  /** The template that declares it. */
  template: JsonObject;
}

let outDir: Promise<string> | undefined;
const cache = new Map<string, Promise<JsonObject>>();

function workDir(): Promise<string> {
  outDir ??= mkdtemp(join(tmpdir(), "sbinbox-arm-"));
  return outDir;
}

async function bicepToJson(args: string[], outFile: string): Promise<JsonObject> {
  const result = await runBicep([...args, "--outfile", outFile]);
  if (result.code !== 0 || result.stderr.trim() !== "") {
    throw new Error(
      `bicep ${args.join(" ")} failed (exit ${result.code}):\n${result.stderr}${result.stdout}`,
    );
  }
  return JSON.parse(await readFile(outFile, "utf8")) as JsonObject;
}

/**
 * Hash of what a Bicep CLI call reads: its arguments, every Bicep, parameters and loaded JSON file it may include,
 * the linter's config, the CLI pin, and the value of each environment variable a `readEnvironmentVariable` names
 * (as runBicep sets them).
 */
async function sourcesHash(args: string[], extraEnv: Record<string, string>): Promise<string> {
  const hash = createHash("sha256").update(JSON.stringify(args));
  const files = globSync(
    // The .json too: loadJsonContent/loadTextContent put the generated workbook and queries into the template.
    [
      "bicep/**/*.bicep",
      "bicep/**/*.bicepparam",
      "bicep/**/*.json",
      "infra/**/*.bicep",
      "infra/**/*.bicepparam",
      "bicepconfig.json",
      "tools/bicep/bicep.csproj",
    ],
    {
      cwd: repoRoot,
    },
  ).sort();
  const variables = new Set<string>();
  for (const file of files) {
    const text = await readFile(join(repoRoot, file), "utf8");
    hash.update(file).update(text);
    for (const [, name] of text.matchAll(/readEnvironmentVariable\(\s*'([^']+)'/g)) variables.add(name!);
  }
  const env: Record<string, string | undefined> = { ...placeholderDeployEnv, ...process.env, ...extraEnv };
  hash.update(JSON.stringify([...variables].sort().map((name) => [name, env[name] ?? null])));
  return hash.digest("hex").slice(0, 32);
}

/**
 * `produce`'s text, computed once for all test processes of the checkout: under the lock, read from the cache or
 * produced and cached. `produce` returns undefined for a result not to keep (a failed compile).
 */
async function shared(key: string, produce: () => Promise<string | undefined>): Promise<string | undefined> {
  const cached = join(repoRoot, "node_modules", ".cache", "sbinbox-arm", `${key}.json`);
  return withRepoLock("bicep", async () => {
    const hit = await readFile(cached, "utf8").catch(() => undefined);
    if (hit !== undefined) return hit;
    const text = await produce();
    if (text === undefined) return undefined;
    await mkdir(join(cached, ".."), { recursive: true });
    await writeFile(`${cached}.tmp`, text);
    await rename(`${cached}.tmp`, cached);
    return text;
  });
}

async function compileShared(args: string[], path: string): Promise<JsonObject> {
  const text = await shared(await sourcesHash(args, {}), async () =>
    JSON.stringify(await bicepToJson(args, join(await workDir(), `${path.replaceAll("/", "_")}.json`))),
  );
  return JSON.parse(text!) as JsonObject;
}

function once(args: string[], path: string): Promise<JsonObject> {
  const key = JSON.stringify(args);
  let entry = cache.get(key);
  if (!entry) {
    entry = compileShared(args, path);
    cache.set(key, entry);
  }
  return entry;
}

/** ARM template of a .bicep file, relative to the repository root. */
export function compileTemplate(path: string): Promise<JsonObject> {
  return once(["build", path], path);
}

/** Parameters JSON of a .bicepparam file (placeholders stand in for the deploy-time environment). */
export function compileParameters(path: string): Promise<JsonObject> {
  return once(["build-params", path], path);
}

/**
 * runBicep, shared as the compiles are: a successful result (exit 0, nothing on stderr) is kept for the other
 * test processes, keyed with `extraEnv`; a failure is run again by each caller and returned as it came.
 */
export async function runBicepShared(
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<BicepResult> {
  let failed: BicepResult | undefined;
  const text = await shared(await sourcesHash(args, extraEnv), async () => {
    const result = await runBicep(args, extraEnv);
    if (result.code === 0 && result.stderr.trim() === "") return JSON.stringify(result);
    failed = result;
    return undefined;
  });
  return failed ?? (JSON.parse(text!) as BicepResult);
}

export function isObject(value: Json | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function str(value: Json | undefined, what = "value"): string {
  if (typeof value !== "string") throw new Error(`${what} is not a string`);
  return value;
}

export function obj(value: Json | undefined, what: string): JsonObject {
  if (!isObject(value)) throw new Error(`${what} is not an object`);
  return value;
}

function entries(resources: Json | undefined): [string, JsonObject][] {
  if (Array.isArray(resources)) return resources.map((r, i) => [String(i), obj(r, `resource ${i}`)]);
  if (isObject(resources)) return Object.entries(resources).map(([k, r]) => [k, obj(r, `resource ${k}`)]);
  return [];
}

/** Every template: the root and each nested module template, depth first. */
export function templates(root: JsonObject): JsonObject[] {
  const found: JsonObject[] = [root];
  for (const [, r] of entries(root.resources)) {
    if (r.type === "Microsoft.Resources/deployments") {
      const nested = obj(obj(r.properties, "deployment properties").template, "nested template");
      found.push(...templates(nested));
    }
  }
  return found;
}

/** Every resource of every template, module deployments themselves excluded. */
export function resources(root: JsonObject): ArmResource[] {
  return templates(root).flatMap((template) =>
    entries(template.resources)
      .filter(([, r]) => r.type !== "Microsoft.Resources/deployments")
      .map(([symbol, r]) => ({
        symbol,
        type: str(r.type, "resource type"),
        name: str(r.name, "resource name"),
        existing: r.existing === true,
        raw: r,
        template,
      })),
  );
}

export function ofType(root: JsonObject, type: string): ArmResource[] {
  return resources(root).filter((r) => r.type.toLowerCase() === type.toLowerCase() && !r.existing);
}

/** The one resource of a type; fails when there are none or several. */
export function single(root: JsonObject, type: string): ArmResource {
  const found = ofType(root, type);
  if (found.length !== 1) throw new Error(`expected one ${type}, found ${found.length}`);
  return found[0]!;
}

export function props(resource: ArmResource): JsonObject {
  return obj(resource.raw.properties, `${resource.type} properties`);
}

/** A template parameter's default value, for properties set as `[parameters('x')]`. */
export function parameterDefault(template: JsonObject, name: string): Json | undefined {
  return obj(obj(template.parameters, "parameters")[name], `parameter ${name}`).defaultValue;
}

/**
 * Evaluates the integer arithmetic of an ARM expression (add, sub, mul, div, parameters, variables), enough to check
 * a derived setting against the parameter values a deployment would use.
 */
export function evaluateInteger(
  template: JsonObject,
  expression: string,
  parameterValues: Record<string, number>,
): number {
  const source = expression.replace(/^\[/, "").replace(/\]$/, "");
  let pos = 0;
  const skip = () => {
    while (source[pos] === " ") pos++;
  };
  const expect = (char: string) => {
    skip();
    if (source[pos] !== char) throw new Error(`expected "${char}" at ${pos} in ${source}`);
    pos++;
  };
  const parse = (): number => {
    skip();
    const literal = /^\d+/.exec(source.slice(pos));
    if (literal) {
      pos += literal[0].length;
      return Number(literal[0]);
    }
    const name = /^\w+/.exec(source.slice(pos))?.[0];
    if (!name) throw new Error(`cannot read ${source.slice(pos)}`);
    pos += name.length;
    expect("(");
    if (name === "parameters" || name === "variables") {
      const key = /^'(\w+)'/.exec(source.slice(pos))?.[1];
      if (!key) throw new Error(`expected a quoted name at ${pos} in ${source}`);
      pos += key.length + 2;
      expect(")");
      if (name === "variables") {
        return evaluateInteger(
          template,
          str(obj(template.variables, "variables")[key], key),
          parameterValues,
        );
      }
      const given = parameterValues[key];
      const fallback = parameterDefault(template, key);
      const value = given ?? fallback;
      if (typeof value !== "number") throw new Error(`parameter ${key} has no integer value`);
      return value;
    }
    const left = parse();
    expect(",");
    const right = parse();
    expect(")");
    switch (name) {
      case "add":
        return left + right;
      case "sub":
        return left - right;
      case "mul":
        return left * right;
      case "div":
        return Math.trunc(left / right);
      default:
        throw new Error(`unsupported function ${name}`);
    }
  };
  const result = parse();
  skip();
  if (pos !== source.length) throw new Error(`trailing input in ${source}`);
  return result;
}

/**
 * Evaluates the string functions of an ARM expression inside a copy loop (format, replace, toLower, string literals,
 * `parameters('x')[copyIndex()]` as `element`), enough to compare text the template builds with the code's.
 */
export function evaluateCopyString(expression: string, element: string): string {
  const source = expression.replace(/^\[/, "").replace(/\]$/, "");
  let pos = 0;
  const skip = () => {
    while (source[pos] === " ") pos++;
  };
  const expect = (char: string) => {
    skip();
    if (source[pos] !== char) throw new Error(`expected "${char}" at ${pos} in ${source}`);
    pos++;
  };
  const parse = (): string => {
    skip();
    if (source[pos] === "'") {
      let text = "";
      pos++;
      for (;;) {
        if (pos >= source.length) throw new Error(`unterminated string in ${source}`);
        if (source[pos] === "'") {
          if (source[pos + 1] === "'") {
            text += "'";
            pos += 2;
            continue;
          }
          pos++;
          return text;
        }
        text += source[pos++];
      }
    }
    const name = /^\w+/.exec(source.slice(pos))?.[0];
    if (!name) throw new Error(`cannot read ${source.slice(pos)}`);
    pos += name.length;
    expect("(");
    const args: string[] = [];
    skip();
    if (source[pos] !== ")") {
      args.push(parse());
      skip();
      while (source[pos] === ",") {
        pos++;
        args.push(parse());
        skip();
      }
    }
    expect(")");
    switch (name) {
      case "parameters": {
        const index = "[copyIndex()]";
        if (source.slice(pos, pos + index.length) !== index)
          throw new Error(`only parameters('x')[copyIndex()] is supported, at ${pos} in ${source}`);
        pos += index.length;
        return element;
      }
      case "format":
        return args[0]!.replace(/\{(\d+)\}/g, (_, i: string) => args[Number(i) + 1]!);
      case "replace":
        return args[0]!.split(args[1]!).join(args[2]);
      case "toLower":
        return args[0]!.toLowerCase();
      default:
        throw new Error(`unsupported function ${name}`);
    }
  };
  const result = parse();
  skip();
  if (pos !== source.length) throw new Error(`trailing text at ${pos} in ${source}`);
  return result;
}
