/** Levenshtein distance between two strings (small inputs: config keys and names). */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost);
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/** ` (did you mean "x"?)` for the closest candidate within a third of the word's length, else "". */
export function didYouMean(word: string, candidates: readonly string[]): string {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const d = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  // A typo changes a few characters; beyond that a suggestion is noise.
  const limit = Math.max(2, Math.ceil(word.length / 3));
  return best !== undefined && bestDistance <= limit ? ` (did you mean "${best}"?)` : "";
}
