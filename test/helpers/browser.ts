import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium, type BrowserContext } from "playwright-core";
import { withRepoLock } from "./repo-lock.ts";

const repoRoot = dirname(dirname(dirname(fileURLToPath(import.meta.url))));
const cacheDir = join(repoRoot, "node_modules", ".cache", "sbinbox-chromium");

/** The browser a test drives, and what its process needs. */
export interface Browser {
  readonly executablePath: string;
  /** Added to the test's environment: the bundled browser's fonts. */
  readonly env: Record<string, string>;
}

/**
 * `SBINBOX_CHROMIUM` when set (a browser of the machine's own), otherwise the headless Chromium that the
 * devDependency @sparticuz/chromium carries inside its npm package, so `npm ci` alone is enough: no apt-get, no
 * download at install or run time (this machine reaches only the npm registry).
 */
export async function findBrowser(): Promise<Browser> {
  const named = process.env.SBINBOX_CHROMIUM;
  if (named) {
    if (!existsSync(named)) throw new Error(`SBINBOX_CHROMIUM=${named}: no such file`);
    return { executablePath: named, env: {} };
  }
  if (process.platform !== "linux" || process.arch !== "x64")
    throw new Error(
      `@sparticuz/chromium's npm package carries a Linux x64 Chromium only (this is ${process.platform} ${process.arch}): set SBINBOX_CHROMIUM to a Chromium or Chrome`,
    );
  return bundledChromium();
}

/**
 * The package ships Chromium brotli-compressed; its own `executablePath()` inflates it into os.tmpdir() and takes
 * any file already there as done, so a run killed half-way (or a checkout with another version) would leave a
 * broken browser for every later one. Here it inflates into a folder beside it, under this checkout's lock, and
 * the folder is renamed into place only when complete: once per `npm ci` (node_modules/.cache), about 2 s.
 */
async function bundledChromium(): Promise<Browser> {
  const packageJson = join(repoRoot, "node_modules", "@sparticuz", "chromium", "package.json");
  const { version } = JSON.parse(await readFile(packageJson, "utf8")) as { version: string };
  const dir = join(cacheDir, version);
  const browser = {
    executablePath: join(dir, "chromium"),
    // The package's own fonts.conf names /tmp/fonts; this one names where they are.
    env: { FONTCONFIG_FILE: join(dir, "fonts.conf") },
  };
  if (existsSync(dir)) return browser;
  await withRepoLock("chromium", async () => {
    if (existsSync(dir)) return;
    const partial = `${dir}.partial`;
    await rm(partial, { recursive: true, force: true });
    await mkdir(partial, { recursive: true });
    await promisify(execFile)(
      process.execPath,
      ["--input-type=module", "-e", 'await (await import("@sparticuz/chromium")).default.executablePath();'],
      { cwd: repoRoot, env: { ...process.env, TMPDIR: partial } },
    );
    await writeFile(join(partial, "fonts.conf"), fontsConf(dir));
    await rename(partial, dir);
  });
  return browser;
}

function fontsConf(dir: string): string {
  return [
    '<?xml version="1.0"?>',
    '<!DOCTYPE fontconfig SYSTEM "fonts.dtd">',
    "<fontconfig>",
    `  <dir>${join(dir, "fonts", "fonts")}</dir>`,
    `  <cachedir>${join(dir, "fonts-cache")}</cachedir>`,
    "</fontconfig>",
    "",
  ].join("\n");
}

/** A headless Chromium with its own profile folder (the caller removes it), as root and without a GPU. */
export async function launchBrowser(
  profile: string,
  options: { viewport: { width: number; height: number } },
): Promise<BrowserContext> {
  const browser = await findBrowser();
  return chromium.launchPersistentContext(profile, {
    executablePath: browser.executablePath,
    env: { ...process.env, ...browser.env },
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
    viewport: options.viewport,
  });
}
