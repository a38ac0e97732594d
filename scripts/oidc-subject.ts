/**
 * The `sub` claim of the OIDC token a GitHub Actions job that names an environment presents, computed ahead of time
 * so the Entra ID federated credential can be made for exactly it. Azure compares the subject as an exact string:
 * a credential made for another form matches no token, and azure/login fails with AADSTS700213.
 *
 * The forms (GitHub's "OpenID Connect reference", sections "Filtering for a specific environment", "Immutable
 * subject claims", "Customizing the subject claims"):
 * - legacy default: `repo:OWNER/REPO:environment:ENV`;
 * - immutable default, for repositories created (or renamed, or transferred) after July 15, 2026, or opted in:
 *   `repo:OWNER@OWNER-ID/REPO@REPO-ID:environment:ENV`;
 * - a customized template (`include_claim_keys`): each key as `key:value`, in the template's order; `context` is
 *   `environment:ENV` for such a job, and the immutable ids stay in the `repo` segment.
 * A `:` inside a value is sent as `%3A`.
 */
import { createHash } from "node:crypto";

/** `gh api repos/OWNER/REPO/actions/oidc/customization/sub`. */
export interface SubjectCustomization {
  readonly use_default?: boolean;
  readonly include_claim_keys?: readonly string[];
  /** The opt-in toggle of an older repository (false for a new one, which has the immutable form anyway). */
  readonly use_immutable_subject?: boolean;
  /** What the repository's subjects start with, as GitHub reports it (`repo:OWNER/REPO` or with the ids). */
  readonly sub_claim_prefix?: string;
}

/** The parts of `gh api repos/OWNER/REPO` the subject can contain. */
export interface Repository {
  readonly owner: string;
  readonly repo: string;
  readonly ownerId: number;
  readonly repoId: number;
  readonly visibility?: string;
  /** ISO 8601, `created_at`: tells the form apart only when GitHub reports no prefix. */
  readonly createdAt?: string;
}

/** Repositories created after this get the immutable form by default (GitHub's OIDC reference). */
export const IMMUTABLE_SINCE = "2026-07-15T00:00:00Z";

const DEFAULT_KEYS = ["repo", "context"] as const;

function escape(value: string): string {
  return value.replaceAll(":", "%3A");
}

/** The `repo` segment without its `repo:` key: `OWNER/REPO` or `OWNER@ID/REPO@ID`. */
export function repoSegment(repository: Repository, customization: SubjectCustomization): string {
  const prefix = customization.sub_claim_prefix;
  if (prefix !== undefined && prefix.startsWith("repo:")) return prefix.slice("repo:".length).split(":")[0]!;
  const immutable =
    customization.use_immutable_subject === true ||
    (repository.createdAt !== undefined && Date.parse(repository.createdAt) > Date.parse(IMMUTABLE_SINCE));
  return immutable
    ? `${repository.owner}@${repository.ownerId}/${repository.repo}@${repository.repoId}`
    : `${repository.owner}/${repository.repo}`;
}

/**
 * The subject of a job in `environment`. `organizationKeys` is the organization's template, needed only when the
 * repository opted in to it (`use_default: false` with no keys of its own); omitted, GitHub's default applies.
 */
export function githubEnvironmentSubject(
  repository: Repository,
  customization: SubjectCustomization,
  environment: string,
  organizationKeys?: readonly string[],
): string {
  if (environment === "") throw new Error("the environment name is empty");
  const own = customization.include_claim_keys ?? [];
  const keys =
    customization.use_default !== false
      ? DEFAULT_KEYS
      : own.length > 0
        ? own
        : organizationKeys && organizationKeys.length > 0
          ? organizationKeys
          : DEFAULT_KEYS;
  const env = escape(environment);
  return keys
    .map((key) => {
      switch (key) {
        case "repo":
          return `repo:${repoSegment(repository, customization)}`;
        case "context":
        case "environment":
          return `environment:${env}`;
        case "repository":
          return `repository:${escape(`${repository.owner}/${repository.repo}`)}`;
        case "repository_owner":
          return `repository_owner:${escape(repository.owner)}`;
        case "repository_owner_id":
          return `repository_owner_id:${repository.ownerId}`;
        case "repository_id":
          return `repository_id:${repository.repoId}`;
        case "repository_visibility":
          if (repository.visibility === undefined) throw new Error("repository_visibility is not known");
          return `repository_visibility:${repository.visibility}`;
        default:
          // job_workflow_ref, ref, actor, ...: the value depends on the run, not only on the repository.
          throw new Error(
            `the subject template includes "${key}", whose value depends on the run: create the federated credential by hand for the subject your workflow's token carries`,
          );
      }
    })
    .join(":");
}

/**
 * The federated credential's name: Entra ID allows letters, digits, '-' and '_' (at most 120), so the readable part
 * loses characters ("prod eu" and "prod/eu" both read prod-eu) and is cut; the subject's short hash keeps two
 * credentials of one application apart, whichever environments or owners they are for.
 */
export function credentialName(repository: Repository, environment: string, subject: string): string {
  const hash = createHash("sha256").update(subject).digest("hex").slice(0, 10);
  const readable = `github-${repository.owner}-${repository.repo}-${environment}`
    .replace(/[^A-Za-z0-9_-]/g, "-")
    .slice(0, 120 - hash.length - 1);
  return `${readable}-${hash}`;
}
