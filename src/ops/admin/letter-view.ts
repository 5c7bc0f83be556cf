// One dead letter as the admin API answers it: the server builds it (dead-letters.ts) and the
// console reads it (page/api.ts). Types only, importing nothing, so the page's browser build can use it.

/** One dead letter as the API shows it (errors masked by the caller's `mask` over the whole answer). */
export interface LetterView {
  id: string;
  app: string;
  namespace: string;
  seq: number;
  /** The seq of its group's first row; null for a row alone. */
  group: number | null;
  state: "dead" | "replayed" | "discarded";
  /**
   * What the remote may have done with it: "in doubt" or "applied" are never replayed (in doubt: until the
   * drain settles it, or a forced replay).
   */
  remote: "not applied" | "in doubt" | "applied";
  reason: string;
  attempts: number;
  error: string | null;
  error_class: string | null;
  created_at: string;
  dead_at: string;
  replayed_at: string | null;
  replayed_as_seq: number | null;
  source: string;
  sql: string;
  /** The bind arguments as stored (a JSON array), parsed; the stored text when it is not JSON. */
  args: unknown;
}
