/**
 * Creates the Entra ID federated credentials of one identity, one per GitHub environment given, for the
 * subject the repository's tokens really carry (scripts/oidc-subject.ts): it asks GitHub for the repository's ids
 * and its subject customization (`gh api`), then `az` creates the credential. Run it signed in to both
 * (`gh auth login`, `az login`). scripts/environment-identities.ts makes the whole set-up (an identity per environment
 * and duty, each with its own credential); this one serves an identity made otherwise (a user-assigned identity).
 *
 *   node scripts/federated-credential.ts --repo OWNER/REPO --app-id <application (client) id> --environment <env>
 *   node scripts/federated-credential.ts --repo OWNER/REPO --identity <name> --resource-group <rg> --environment <env>
 *   ... --dry-run   prints the subjects and creates nothing
 */
import { execFile } from "node:child_process";
import { parseArgs } from "node:util";
import { readRepository } from "./github-repository.ts";
import { credentialName, githubEnvironmentSubject } from "./oidc-subject.ts";

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
  // One identity, one GitHub environment: an identity that accepted dev's tokens and prod's would let a dev run
  // walk around prod's gate (docs/deploy.md, "Set-up, once").
  const environments = values.environment ?? [];
  if (environments.length !== 1) {
    throw new Error(
      "give exactly one --environment: each identity accepts the tokens of one GitHub environment " +
        "(scripts/environment-identities.ts makes one identity per environment and duty)",
    );
  }

  const { repository, customization, organizationKeys } = await readRepository(owner, name, (path) =>
    run("gh", ["api", path]),
  );
  // Every subject first: a template that cannot be computed is refused before anything is asked of az.
  const subjects = environments.map(
    (environment) =>
      [
        environment,
        githubEnvironmentSubject(repository, customization, environment, organizationKeys),
      ] as const,
  );
  // The credentials that exist, so a rerun updates its own instead of failing on the name.
  const listArgs = byApp
    ? ["ad", "app", "federated-credential", "list", "--id", values["app-id"]!]
    : [
        "identity",
        "federated-credential",
        "list",
        "--identity-name",
        values.identity!,
        "--resource-group",
        values["resource-group"]!,
      ];
  const existing = values["dry-run"]
    ? []
    : (await run("az", [...listArgs, "--query", "[].name", "--output", "tsv"]))
        .split("\n")
        .map((line) => line.trim())
        .filter(Boolean);
  const made: string[] = [];
  for (const [environment, subject] of subjects) {
    const credential = credentialName(repository, environment, subject);
    made.push(credential);
    process.stdout.write(`${environment}: ${subject}\n`);
    if (values["dry-run"]) continue;
    const verb = existing.includes(credential) ? "update" : "create";
    if (byApp) {
      await run("az", [
        "ad",
        "app",
        "federated-credential",
        verb,
        "--id",
        values["app-id"]!,
        ...(verb === "update" ? ["--federated-credential-id", credential] : []),
        "--parameters",
        JSON.stringify({ name: credential, issuer: ISSUER, subject, audiences: [AUDIENCE] }),
        "--output",
        "none",
      ]);
    } else {
      await run("az", [
        "identity",
        "federated-credential",
        verb,
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
    process.stdout.write(
      `  ${verb === "update" ? "updated" : "created"} federated credential ${credential}\n`,
    );
  }
  // A rename or transfer changes the subject, so the credentials for the old one stay: named, not deleted (the
  // old name may still be in use until the repository's tokens carry the new one).
  const others = existing.filter((name) => name.startsWith("github-") && !made.includes(name));
  if (others.length > 0) {
    process.stdout.write(
      `other github-* credentials, not touched (delete one that was for an old repository name with ` +
        `${byApp ? "az ad app federated-credential delete --id <app id> --federated-credential-id <name>" : "az identity federated-credential delete --name <name> --identity-name <identity> --resource-group <rg>"}): ${others.join(", ")}\n`,
    );
  }
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`federated-credential: ${(error as Error).message}\n`);
  process.exitCode = 2;
}
