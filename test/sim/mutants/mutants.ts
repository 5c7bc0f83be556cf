// The mutants: each a small change to a copy of src/ that brings back a known class of bug (some of
// them bugs this project had). `bun run sim:mutants` runs the simulator over each and fails unless
// every one is caught within its seed budget: the simulator's proof that it bites.
//
// A mutant is one or more edits: a text to find — exactly once — in a file of src/ and what to put
// in its place. When the code moves on and a `find` no longer matches, the run says the mutant is
// stale and fails: update it to the code as it is now (the bug it stands for has not gone away).
// Adding one is one entry.

/** One edit of a mutant: `find` (exactly once in src/`file`) becomes `replace`. */
export interface Edit {
  file: string;
  find: string;
  replace: string;
}

export interface Mutant {
  name: string;
  /** The bug it brings back, and what must catch it. */
  why: string;
  edits: readonly Edit[];
  /** How many seeds (from 1) may run before it must have been caught. */
  budget: number;
  /** The profile its seeds run with; none: the mix. */
  profile?: string;
}

export const MUTANTS: readonly Mutant[] = [
  {
    name: "issue-37-reverted",
    why: "a group that waits for its part in another table holds every lane of its table, not only its own: the other lanes of the table stop with it (free-lanes-advance)",
    edits: [
      {
        file: "drain/linked-groups.ts",
        find: "        lanes.hold(groupLanes, group);\n",
        replace: "        lanes.hold([null], group);\n",
      },
    ],
    budget: 300,
    profile: "held-lanes",
  },
  {
    name: "confirm-before-answer",
    why: "a slice is taken as applied the moment it is sent, before the remote answers: a batch refused or rolled back is confirmed locally all the same, and its rows never land (exactly-once, drained)",
    edits: [
      {
        file: "drain/delivery.ts",
        find: "    call.then(wired, wired); // a writer that never says so: its answer will do\n",
        replace:
          "    call.then(wired, wired); // a writer that never says so: its answer will do\n    for (const slice of batch.slices) slice.table.applyAnswer(slice, slice.stmts.map(() => ({ ok: true })), this.now());\n",
      },
    ],
    budget: 200,
  },
  {
    name: "fence-skipped",
    why: "the ledger's fence moves `through` whatever it was: a batch the drain gave up on that commits late, or one behind another that arrives first, lands again or out of order (exactly-once, ledger)",
    edits: [
      {
        file: "sql/ledger.ts",
        find: "END THEN excluded.through END`,",
        replace: "END THEN excluded.through ELSE excluded.through END`,",
      },
    ],
    budget: 300,
    profile: "heavy-faults",
  },
  {
    name: "read-ahead-frontier-kept",
    why: "1b17999 reverted: with lanes, the frontier of an earlier read is kept after the row it names was read again and delivered, so the local confirmation never passes it and applied rows stay queued (drained)",
    edits: [
      {
        file: "drain/table/planning.ts",
        find: "const behind = cursor !== null && frontier !== null && frontier <= cursor ? frontier : null;",
        replace: "const behind = cursor !== null && frontier !== null ? frontier : null;",
      },
    ],
    budget: 300,
    profile: "held-lanes",
  },
  {
    name: "cross-table-backoff-ignored",
    why: "464f32d reverted: a table planned because a transaction across tables waits at its head (forced) skips its head's backoff — in its readiness and in its plan — so the group is sent again at once (backoff, dead-letters)",
    edits: [
      {
        file: "drain/schedule.ts",
        find: "  if (head.nextAttemptAt && !lanes) {",
        replace: "  if (head.nextAttemptAt && !lanes && !awaited) {",
      },
      {
        file: "drain/table/planning.ts",
        find: "    nowMs: at.now,\n",
        replace: "    nowMs: (at as { force?: boolean }).force ? Number.POSITIVE_INFINITY : at.now,\n",
      },
    ],
    budget: 300,
    profile: "held-lanes",
  },
  {
    name: "ambiguous-commit-resent",
    why: "an outcome the drain does not know (an answer lost, a crash) is settled by sending the rows again instead of confirming what the ledger says was applied (exactly-once)",
    edits: [
      {
        file: "drain/table/progress.ts",
        find: "    confirmed += this.confirm(Math.min(queue.sentMark(), through));",
        replace: "    confirmed += 0;",
      },
    ],
    budget: 200,
  },
  {
    name: "lanes-differ-per-table",
    why: "two tables hash one key to different lanes (and neither as documented): a key's rows are ordered, held and accounted for in the wrong lane (ledger, lane-order)",
    edits: [
      {
        file: "drain/table/lane-map.ts",
        find: "    return key === null ? null : keyHash(key) % this.count;",
        replace: "    return key === null ? null : (keyHash(key) + this.table.charCodeAt(1)) % this.count;",
      },
    ],
    budget: 200,
    profile: "many-lanes",
  },
  {
    name: "dead-letter-one-early",
    why: "a head is dead-lettered one attempt before max_attempts (dead-letters)",
    edits: [
      {
        file: "drain/table/charges.ts",
        find: "    if (app.maxAttempts !== null && attempts >= app.maxAttempts) {",
        replace: "    if (app.maxAttempts !== null && attempts + 1 >= app.maxAttempts) {",
      },
    ],
    budget: 300,
    profile: "heavy-faults",
  },
  {
    name: "replay-ignores-doubt",
    why: "a replay takes every letter for never applied: one whose batch was in flight or lost when it was skipped, and committed, is applied a second time (dead-letters, exactly-once)",
    edits: [
      {
        file: "outbox/dead-log.ts",
        find: '          if (remote === "applied" || (remote === "in doubt" && !force)) {',
        replace: "          if (false) {",
      },
    ],
    budget: 300,
    profile: "heavy-faults",
  },
  {
    name: "skip-never-in-doubt",
    why: "skip-in-flight brought back: a head the operator skips is taken for never sent, while a batch carrying it may commit (dead-letters)",
    edits: [
      {
        file: "outbox/dead-log.ts",
        find: "      const doubt = inDoubt ?? rows.some((r) => r.seq <= file.sentMark(r.namespace));",
        replace: "      const doubt = inDoubt ?? false;",
      },
    ],
    budget: 300,
    profile: "heavy-faults",
  },
  {
    name: "answer-forgets-carried",
    why: "an answer that says a batch committed settles every letter in doubt its fence passed as not applied, those it carried too: a head skipped while its batch was on its way is replayed and applied twice (dead-letters)",
    edits: [
      {
        file: "drain/table/doubt.ts",
        find: '      return move.seqs.has(letter) ? "applied" : "not applied";',
        replace: '      return "not applied";',
      },
    ],
    budget: 600,
  },
  {
    name: "settlement-blames-any-move",
    why: "a settlement that finds a ledger row moved past a letter in doubt takes it as applied even when a batch of ours that did not carry it could have moved it (dead-letters)",
    edits: [
      {
        file: "drain/table/doubt.ts",
        find: '        return movers.length > 0 && movers.every((m) => m.seqs.has(letter)) ? "applied" : null;',
        replace: '        return movers.length > 0 ? "applied" : null;',
      },
    ],
    budget: 1000,
    profile: "fleet",
  },
  {
    name: "one-tenant-holds-all",
    why: "a tenant whose database is down holds every tenant of the template, not itself alone: the others' rows wait for it (free-lanes-advance)",
    edits: [
      {
        file: "drain/tenants/remotes.ts",
        find: "    const failing = this.#failing.get(tenant);\n    return failing !== undefined && failing.hold.until > now ? failing.hold.until : null;",
        replace:
          "    const failing = [...this.#failing.values()].find((f) => f.hold.until > now);\n    return failing !== undefined ? failing.hold.until : null;",
      },
    ],
    budget: 200,
    profile: "tenants",
  },
  {
    name: "tenants-share-lanes",
    why: "every tenant's rows are tracked as one set of lanes: one tenant's ledger throughs and holds are taken for another's (exactly-once, ledger, lane-order, drained)",
    edits: [
      {
        file: "drain/table/lanes.ts",
        find: "    if (tenant === null || !this.tenanted) return this.#own;",
        replace: "    return this.#own;",
      },
    ],
    budget: 200,
    profile: "tenants",
  },
];
