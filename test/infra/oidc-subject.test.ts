import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  credentialName,
  githubEnvironmentSubject,
  type Repository,
  type SubjectCustomization,
} from "../../scripts/oidc-subject.ts";

const octo: Repository = {
  owner: "octo-org",
  repo: "octo-repo",
  ownerId: 123456,
  repoId: 456789,
  visibility: "private",
  createdAt: "2024-03-01T10:00:00Z",
};
const newRepo: Repository = { ...octo, createdAt: "2026-08-12T09:00:00Z" };

describe("the GitHub OIDC subject a deploy job in an environment presents (scripts/oidc-subject.ts)", function () {
  const cases: [string, Repository, SubjectCustomization, string, string][] = [
    [
      "legacy default, as GitHub reports it",
      octo,
      { use_default: true, sub_claim_prefix: "repo:octo-org/octo-repo" },
      "dev",
      "repo:octo-org/octo-repo:environment:dev",
    ],
    [
      "immutable default, as GitHub reports it",
      newRepo,
      {
        use_default: true,
        use_immutable_subject: false,
        sub_claim_prefix: "repo:octo-org@123456/octo-repo@456789",
      },
      "prod",
      "repo:octo-org@123456/octo-repo@456789:environment:prod",
    ],
    [
      "legacy default, no prefix reported, created before 2026-07-15",
      octo,
      { use_default: true },
      "dev",
      "repo:octo-org/octo-repo:environment:dev",
    ],
    [
      "immutable default, no prefix reported, created after 2026-07-15",
      newRepo,
      { use_default: true },
      "dev",
      "repo:octo-org@123456/octo-repo@456789:environment:dev",
    ],
    [
      "an older repository that opted in",
      octo,
      { use_default: true, use_immutable_subject: true },
      "dev",
      "repo:octo-org@123456/octo-repo@456789:environment:dev",
    ],
    [
      "a ':' in the environment name",
      octo,
      { use_default: true },
      "prod:eu",
      "repo:octo-org/octo-repo:environment:prod%3Aeu",
    ],
    [
      "a custom template keeps the ids in the repo segment",
      newRepo,
      { use_default: false, include_claim_keys: ["repo", "context", "repository_visibility"] },
      "dev",
      "repo:octo-org@123456/octo-repo@456789:environment:dev:repository_visibility:private",
    ],
    [
      "a template of ids only",
      octo,
      { use_default: false, include_claim_keys: ["repository_owner_id", "repository_id", "environment"] },
      "dev",
      "repository_owner_id:123456:repository_id:456789:environment:dev",
    ],
  ];
  for (const [what, repository, customization, environment, expected] of cases) {
    it(what, function () {
      assert.equal(githubEnvironmentSubject(repository, customization, environment), expected);
    });
  }

  it("uses the organization's template when the repository opted in to it", function () {
    assert.equal(
      githubEnvironmentSubject(octo, { use_default: false }, "dev", ["repository_owner", "context"]),
      "repository_owner:octo-org:environment:dev",
    );
    assert.equal(
      githubEnvironmentSubject(octo, { use_default: false }, "dev"),
      "repo:octo-org/octo-repo:environment:dev",
    );
  });

  it("refuses a template whose value depends on the run, naming the key", function () {
    assert.throws(
      () =>
        githubEnvironmentSubject(
          octo,
          { use_default: false, include_claim_keys: ["repo", "job_workflow_ref"] },
          "dev",
        ),
      /"job_workflow_ref", whose value depends on the run/,
    );
  });
});

describe("the federated credential's name (scripts/oidc-subject.ts credentialName)", function () {
  const subject = (r: Repository, env: string) => `repo:${r.owner}/${r.repo}:environment:${env}`;
  it("keeps apart environments that read the same once cleaned, and one repo name under two owners", function () {
    const names = [
      credentialName(octo, "prod eu", subject(octo, "prod eu")),
      credentialName(octo, "prod/eu", subject(octo, "prod/eu")),
      credentialName({ ...octo, owner: "other-org" }, "dev", subject({ ...octo, owner: "other-org" }, "dev")),
      credentialName(octo, "dev", subject(octo, "dev")),
    ];
    assert.equal(new Set(names).size, 4, names.join("\n"));
    assert.match(names[0]!, /^github-octo-org-octo-repo-prod-eu-[0-9a-f]{10}$/);
    assert.match(names[2]!, /^github-other-org-octo-repo-dev-[0-9a-f]{10}$/);
  });
  it("stays within Entra ID's 120 characters and alphabet, with the hash kept whole", function () {
    const long = { ...octo, owner: "o".repeat(39), repo: "r".repeat(100) };
    const name = credentialName(long, "production-europe", subject(long, "production-europe"));
    assert.equal(name.length, 120);
    assert.match(name, /^[A-Za-z0-9_-]+-[0-9a-f]{10}$/);
  });
});

describe("scripts/federated-credential.ts against stand-ins for gh and az", function () {
  this.timeout(30_000);
  let dir: string;
  const script = fileURLToPath(new URL("../../scripts/federated-credential.ts", import.meta.url));

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "sbinbox-federated-"));
    await writeFile(
      join(dir, "gh"),
      `#!/usr/bin/env bash
case "$2" in
  repos/octo-org/octo-repo) echo '{"id": 456789, "name": "octo-repo", "visibility": "private", "created_at": "2026-08-12T09:00:00Z", "owner": {"id": 123456, "login": "octo-org", "type": "Organization"}}' ;;
  repos/octo-org/octo-repo/actions/oidc/customization/sub) echo "$STANDIN_SUB" ;;
  *) echo "not found: $2" >&2; exit 1 ;;
esac
`,
    );
    await writeFile(
      join(dir, "az"),
      `#!/usr/bin/env bash\nprintf '%s\\n' "$*" >> "$STANDIN_LOG"\ncase "$*" in *" list "*) printf '%b' "\${STANDIN_EXISTING:-}" ;; esac\n`,
    );
    await chmod(join(dir, "gh"), 0o755);
    await chmod(join(dir, "az"), 0o755);
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  function start(
    args: string[],
    sub: string,
    existing = "",
  ): Promise<{ code: number; stdout: string; stderr: string; log: string[] }> {
    return new Promise((resolve) => {
      execFile(
        process.execPath,
        [script, ...args],
        {
          env: {
            PATH: `${dir}:${process.env.PATH ?? ""}`,
            STANDIN_SUB: sub,
            STANDIN_LOG: join(dir, "log"),
            STANDIN_EXISTING: existing,
          },
        },
        (error, stdout, stderr) => {
          void readFile(join(dir, "log"), "utf8")
            .catch(() => "")
            .then((log) =>
              resolve({
                code: error ? Number((error as { code?: number }).code ?? 1) : 0,
                stdout,
                stderr,
                log: log.trim().split("\n").filter(Boolean),
              }),
            );
        },
      );
    });
  }

  it("creates the environment's credential for the subject GitHub reports", async function () {
    const result = await start(
      [
        "--repo",
        "octo-org/octo-repo",
        "--app-id",
        "11111111-2222-3333-4444-555555555555",
        "--environment",
        "prod",
      ],
      '{"use_default": true, "use_immutable_subject": false, "sub_claim_prefix": "repo:octo-org@123456/octo-repo@456789"}',
    );
    assert.equal(result.code, 0, result.stderr);
    assert.equal(
      result.log[0],
      "ad app federated-credential list --id 11111111-2222-3333-4444-555555555555 --query [].name --output tsv",
    );
    assert.equal(result.log.length, 2);
    const parameters = result.log
      .slice(1)
      .map(
        (line) =>
          JSON.parse(/--parameters (\{.*\}) --output none$/.exec(line)![1]!) as Record<string, unknown>,
      );
    assert.deepEqual(parameters, [
      {
        name: "github-octo-org-octo-repo-prod-095065c960",
        issuer: "https://token.actions.githubusercontent.com",
        subject: "repo:octo-org@123456/octo-repo@456789:environment:prod",
        audiences: ["api://AzureADTokenExchange"],
      },
    ]);
    assert.match(
      result.log[1]!,
      /^ad app federated-credential create --id 11111111-2222-3333-4444-555555555555 /,
    );
  });

  it("updates a credential that exists (a rerun), and names other github-* ones without deleting them", async function () {
    const result = await start(
      ["--repo", "octo-org/octo-repo", "--app-id", "app-1", "--environment", "dev"],
      '{"use_default": true, "sub_claim_prefix": "repo:octo-org@123456/octo-repo@456789"}',
      "github-octo-org-octo-repo-dev-e9c336bd4a\\ngithub-old-name-dev\\nsomeone-else\\n",
    );
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.log.length, 2, result.log.join("\n"));
    assert.match(
      result.log[1]!,
      /^ad app federated-credential update --id app-1 --federated-credential-id github-octo-org-octo-repo-dev-e9c336bd4a --parameters /,
    );
    assert.match(result.stdout, /updated federated credential github-octo-org-octo-repo-dev-e9c336bd4a/);
    assert.match(result.stdout, /other github-\* credentials, not touched .*: github-old-name-dev\n/);
    assert.doesNotMatch(result.stdout, /someone-else/);
    assert.ok(!result.log.some((l) => / delete /.test(l)));
  });

  it("for a user-assigned identity, and says when GitHub gave no prefix", async function () {
    const result = await start(
      [
        "--repo",
        "octo-org/octo-repo",
        "--identity",
        "id-deploy",
        "--resource-group",
        "rg-deploy",
        "--environment",
        "dev",
      ],
      '{"use_default": true}',
    );
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stderr, /no sub_claim_prefix/);
    assert.deepEqual(result.log, [
      "identity federated-credential list --identity-name id-deploy --resource-group rg-deploy --query [].name --output tsv",
      "identity federated-credential create --name github-octo-org-octo-repo-dev-e9c336bd4a --identity-name id-deploy --resource-group rg-deploy --issuer https://token.actions.githubusercontent.com --subject repo:octo-org@123456/octo-repo@456789:environment:dev --audiences api://AzureADTokenExchange --output none",
    ]);
  });

  it("refuses one identity for two environments, or for none named", async function () {
    for (const environments of [[], ["--environment", "dev", "--environment", "prod"]]) {
      const result = await start(
        ["--repo", "octo-org/octo-repo", "--app-id", "x", ...environments],
        '{"use_default": true, "sub_claim_prefix": "repo:octo-org/octo-repo"}',
      );
      assert.equal(result.code, 2);
      assert.match(result.stderr, /give exactly one --environment/);
      assert.deepEqual(result.log, []);
    }
  });

  it("creates nothing with --dry-run, nor when the template cannot be computed", async function () {
    const dry = await start(
      ["--repo", "octo-org/octo-repo", "--dry-run", "--environment", "prod"],
      '{"use_default": true, "sub_claim_prefix": "repo:octo-org/octo-repo"}',
    );
    assert.equal(dry.code, 0, dry.stderr);
    assert.equal(dry.stdout, "prod: repo:octo-org/octo-repo:environment:prod\n");
    assert.deepEqual(dry.log, []);
    const custom = await start(
      ["--repo", "octo-org/octo-repo", "--app-id", "x", "--environment", "dev"],
      '{"use_default": false, "include_claim_keys": ["job_workflow_ref"]}',
    );
    assert.equal(custom.code, 2);
    assert.match(custom.stderr, /job_workflow_ref/);
    assert.deepEqual(custom.log, []);
  });
});
