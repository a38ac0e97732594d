/**
 * Creates the Entra ID federated credentials the deploy workflow signs in with, one per GitHub environment, for the
 * subject the repository's tokens really carry (scripts/oidc-subject.ts): it asks GitHub for the repository's ids
 * and its subject customization (`gh api`), then `az` creates the credential. Run it signed in to both
 * (`gh auth login`, `az login`); docs/deploy.md, "Deploy from GitHub Actions".
 *
 *   node scripts/federated-credential.ts --repo OWNER/REPO --app-id <application (client) id> [--environment dev ...]
 *   node scripts/federated-credential.ts --repo OWNER/REPO --identity <name> --resource-group <rg> [...]
 *   ... --dry-run   prints the subjects and creates nothing
 */
import { execFile } from "node:child_process";
import { parseArgs } from "node:util";
import { githubEnvironmentSubject, type Repository, type SubjectCustomization } from "./oidc-subject.ts";

const ISSUER = "https://token.actions.githubusercontent.com";
// What azure/login asks GitHub's token for, and Entra ID expects of a GitHub credential.
const AUDIENCE = "api://AzureADTokenExchange";

function run(file: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error)
        reject(new Error(`${file} ${args.slice(0, 3).join(" ")} failed: ${stderr.trim() || error.message}`));
      else resolve(stdout);
    });
  });
}

async function ghJson<T>(path: string): Promise<T> {
  return JSON.parse(await run("gh", ["api", path])) as T;
}

interface RepoResponse {
  id: number;
  name: string;
  visibility?: string;
  created_at?: string;
  owner: { id: number; login: string; type?: string };
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      repo: { type: "string" },
      environment: { type: "string", multiple: true },
      "app-id": { type: "string" },
      identity: { type: "string" },
      "resource-group": { type: "string" },
      "dry-run": { type: "boolean", default: false },
    },
    strict: true,
  });
  const [owner, name, extra] = (values.repo ?? "").split("/");
  if (!owner || !name || extra !== undefined) throw new Error("--repo OWNER/REPO is required");
  const byApp = values["app-id"] !== undefined;
  const byIdentity = values.identity !== undefined && values["resource-group"] !== undefined;
  if (byApp === byIdentity && !values["dry-run"]) {
    throw new Error("give --app-id, or --identity with --resource-group (or --dry-run)");
  }
  const environments = values.environment ?? ["dev", "prod"];

  const repo = await ghJson<RepoResponse>(`repos/${owner}/${name}`);
  const customization = await ghJson<SubjectCustomization>(
    `repos/${owner}/${name}/actions/oidc/customization/sub`,
  );
  let organizationKeys: string[] | undefined;
  if (customization.use_default === false && !customization.include_claim_keys?.length) {
    if (repo.owner.type === "Organization") {
      organizationKeys = (
        await ghJson<{ include_claim_keys?: string[] }>(
          `orgs/${repo.owner.login}/actions/oidc/customization/sub`,
        )
      ).include_claim_keys;
    }
  }
  const repository: Repository = {
    owner: repo.owner.login,
    repo: repo.name,
    ownerId: repo.owner.id,
    repoId: repo.id,
    visibility: repo.visibility,
    createdAt: repo.created_at,
  };
  if (customization.sub_claim_prefix === undefined) {
    process.stderr.write(
      "federated-credential: GitHub reported no sub_claim_prefix; the form is inferred from the creation date, " +
        "which misses a rename or transfer after 2026-07-15 (check the token with github/actions-oidc-debugger)\n",
    );
  }
  for (const environment of environments) {
    const subject = githubEnvironmentSubject(repository, customization, environment, organizationKeys);
    // Entra ID: letters, digits, '-' and '_'; unique per application or identity.
    const credential = `github-${repository.repo}-${environment}`
      .replace(/[^A-Za-z0-9_-]/g, "-")
      .slice(0, 120);
    process.stdout.write(`${environment}: ${subject}\n`);
    if (values["dry-run"]) continue;
    if (byApp) {
      await run("az", [
        "ad",
        "app",
        "federated-credential",
        "create",
        "--id",
        values["app-id"]!,
        "--parameters",
        JSON.stringify({ name: credential, issuer: ISSUER, subject, audiences: [AUDIENCE] }),
        "--output",
        "none",
      ]);
    } else {
      await run("az", [
        "identity",
        "federated-credential",
        "create",
        "--name",
        credential,
        "--identity-name",
        values.identity!,
        "--resource-group",
        values["resource-group"]!,
        "--issuer",
        ISSUER,
        "--subject",
        subject,
        "--audiences",
        AUDIENCE,
        "--output",
        "none",
      ]);
    }
    process.stdout.write(`  created federated credential ${credential}\n`);
  }
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`federated-credential: ${(error as Error).message}\n`);
  process.exitCode = 2;
}
