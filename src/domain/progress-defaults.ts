/**
 * The progress monitor's defaults, in a file of their own so the configuration schema reads them without loading
 * the SDK. A peek answers in milliseconds on a live connection, so 5 s quiet and 5 s to answer cost one small peek per
 * 5 s per idle instance and still turn a silent link within about 15 s (half a default 30 s lock); recovery is
 * asked for every second while silent (src/worker/progress.ts), so ready follows the link back within about `recoverAfterMs`.
 */
export const PROGRESS_DEFAULTS = {
  quietMs: 5_000,
  probeTimeoutMs: 5_000,
  silentAfterMs: 15_000,
  recoverAfterMs: 5_000,
} as const satisfies Record<string, number>;
