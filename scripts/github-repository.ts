/**
 * What GitHub says about a repository that decides its OIDC subjects: its ids (`gh api repos/OWNER/REPO`), its
 * subject customization and, when it defers to it, the organization's template. Shared by the scripts that create
 * federated credentials (scripts/federated-credential.ts, scripts/environment-identities.ts).
 */
import type { Repository, SubjectCustomization } from "./oidc-subject.ts";

interface RepoResponse {
  id: number;
  name: string;
  visibility?: string;
  created_at?: string;
  owner: { id: number; login: string; type?: string };
}

export interface RepositorySubjectFacts {
  readonly repository: Repository;
  readonly customization: SubjectCustomization;
  readonly organizationKeys?: readonly string[];
}

/** `ghApi(path)` returns `gh api PATH`'s output. Warns on stderr when GitHub reports no subject prefix. */
export async function readRepository(
  owner: string,
  name: string,
  ghApi: (path: string) => Promise<string>,
): Promise<RepositorySubjectFacts> {
  const repo = JSON.parse(await ghApi(`repos/${owner}/${name}`)) as RepoResponse;
  const customization = JSON.parse(
    await ghApi(`repos/${owner}/${name}/actions/oidc/customization/sub`),
  ) as SubjectCustomization;
  let organizationKeys: string[] | undefined;
  if (customization.use_default === false && !customization.include_claim_keys?.length) {
    if (repo.owner.type === "Organization") {
      organizationKeys = (
        JSON.parse(await ghApi(`orgs/${repo.owner.login}/actions/oidc/customization/sub`)) as {
          include_claim_keys?: string[];
        }
      ).include_claim_keys;
    }
  }
  if (customization.sub_claim_prefix === undefined) {
    process.stderr.write(
      "GitHub reported no sub_claim_prefix; the form is inferred from the creation date, " +
        "which misses a rename or transfer after 2026-07-15 (check the token with github/actions-oidc-debugger)\n",
    );
  }
  return {
    repository: {
      owner: repo.owner.login,
      repo: repo.name,
      ownerId: repo.owner.id,
      repoId: repo.id,
      visibility: repo.visibility,
      createdAt: repo.created_at,
    },
    customization,
    organizationKeys,
  };
}
