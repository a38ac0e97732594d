// The issue's targets as checks over the measured rows: each printed with its figures and met / missed.
export interface Target {
  readonly what: string;
  /** The figures it was judged on, e.g. "1.12 at 32". */
  readonly figures: string;
  readonly met: boolean;
}

export const target = (
  what: string,
  pairs: readonly [string, number][],
  ok: (x: number) => boolean,
): Target => ({
  what,
  figures: pairs.map(([label, x]) => `${x.toFixed(2)} ${label}`).join(", ") || "not measured",
  met: pairs.length > 0 && pairs.every(([, x]) => ok(x)),
});

/** `issue`: the issue that names these targets (29 for the throughput rows, 41 for the ledger's). */
export function targetLines(targets: readonly Target[], issue = "issue 29"): string[] {
  return [
    `targets (${issue}):`,
    ...targets.map((t) => `  ${t.met ? "met   " : "MISSED"}  ${t.what}: ${t.figures}`),
  ];
}
