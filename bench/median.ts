/**
 * The median: the middle value, or the mean of the two middle values of an even count. (Taking the element at
 * floor(n / 2) of an even count gives the upper middle: of two rounds, the better one.)
 */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new RangeError("the median of no values");
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
