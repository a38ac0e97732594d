/**
 * The repository's own rules for workflows, beyond what actionlint checks: actions pinned to a full commit SHA with
 * the version in a comment, read-only permissions at workflow level, concurrency set, a timeout on every job, and
 * an environment on every job that may ask for an OIDC token (`id-token: write`): the federated credentials accept
 * environment subjects only, and the environment's protection rules (reviewers, branches) are what guard the token.
 * Line-based on purpose: the workflows are small and written in one style, and no YAML parser is a dependency.
 */
/**
 * The first major of each action that runs on Node 24 (its action.yml says `using: node24`): GitHub runs Node 20
 * actions only until it retires that runtime, so an older pin is a finding.
 */
export const NODE24_MAJORS: Readonly<Record<string, number>> = {
  "actions/checkout": 5,
  "actions/setup-node": 5,
  "actions/upload-artifact": 6,
  "actions/download-artifact": 7,
};

export function workflowPolicyFindings(text: string, path: string): string[] {
  const findings: string[] = [];
  const lines = text.split("\n");

  lines.forEach((line, i) => {
    const uses = /^\s*(?:-\s+)?uses:\s*(\S+)(.*)$/.exec(line);
    if (!uses) return;
    const [, ref = "", rest = ""] = uses;
    if (ref.startsWith("./") || ref.startsWith("docker://")) return;
    if (!/^[\w.-]+\/[\w./-]+@[0-9a-f]{40}$/.test(ref) || !/#\s*v\d/.test(rest)) {
      findings.push(`${path}:${i + 1}: "${ref}" is not pinned to a full commit SHA with a "# vX" comment`);
    }
    const action = ref.split("@")[0]!;
    const major = Number(/#\s*v(\d+)/.exec(rest)?.[1]);
    const node24 = NODE24_MAJORS[action];
    if (node24 !== undefined && major < node24) {
      findings.push(
        `${path}:${i + 1}: ${action} v${major} runs on Node 20; v${node24} or later runs on Node 24`,
      );
    }
  });

  const topLevel = (key: string) => lines.findIndex((l) => new RegExp(`^${key}:`).test(l));
  const permissions = topLevel("permissions");
  if (permissions < 0) {
    findings.push(`${path}: no workflow-level permissions`);
  } else {
    const inline = lines[permissions]!.replace(/^permissions:\s*/, "").trim();
    const block: string[] = [];
    for (let i = permissions + 1; i < lines.length && /^\s+\S/.test(lines[i]!); i++)
      block.push(lines[i]!.trim());
    const grants = inline === "" ? block : [inline];
    for (const grant of grants) {
      if (grant.startsWith("#") || grant === "{}") continue;
      if (!/^[\w-]+:\s*(read|none)\b/.test(grant)) {
        findings.push(
          `${path}: workflow-level permission "${grant}" is more than read (grant it on the job)`,
        );
      }
    }
  }
  if (topLevel("concurrency") < 0) findings.push(`${path}: no concurrency`);

  const jobsAt = topLevel("jobs");
  if (jobsAt < 0) {
    findings.push(`${path}: no jobs`);
  } else {
    let job: string | undefined;
    let hasTimeout = false;
    let hasIdToken = false;
    let hasEnvironment = false;
    const close = () => {
      if (job !== undefined && !hasTimeout) findings.push(`${path}: job "${job}" has no timeout-minutes`);
      if (job !== undefined && hasIdToken && !hasEnvironment) {
        findings.push(
          `${path}: job "${job}" has id-token: write but no environment, so no environment protection rule guards its token`,
        );
      }
    };
    for (let i = jobsAt + 1; i < lines.length; i++) {
      const line = lines[i]!;
      const start = /^ {2}([\w-]+):\s*$/.exec(line);
      if (start) {
        close();
        job = start[1];
        hasTimeout = false;
        hasIdToken = false;
        hasEnvironment = false;
      } else if (/^ {4}timeout-minutes:\s*\d+/.test(line)) {
        hasTimeout = true;
      } else if (/^ {6}id-token:\s*write\b/.test(line)) {
        hasIdToken = true;
      } else if (/^ {4}environment:\s*\S/.test(line)) {
        hasEnvironment = true;
      } else if (/^\S/.test(line)) {
        break;
      }
    }
    close();
  }
  return findings;
}
