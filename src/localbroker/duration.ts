/**
 * ISO 8601 durations as the emulator's Config.json writes them ("PT1M", "PT20S", "P14D", "PT0.5S").
 * Years and months are rejected: their length in milliseconds is not fixed.
 */
const pattern =
  /^P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/;

export function parseIsoDuration(text: string): number | undefined {
  const match = pattern.exec(text.trim().toUpperCase());
  if (!match || text.trim().toUpperCase() === "P" || text.trim().toUpperCase().endsWith("T"))
    return undefined;
  const [, weeks, days, hours, minutes, seconds] = match;
  const n = (s: string | undefined): number => (s === undefined ? 0 : Number(s));
  const ms = (((n(weeks) * 7 + n(days)) * 24 + n(hours)) * 60 + n(minutes)) * 60_000 + n(seconds) * 1000;
  return Math.round(ms);
}
