import { defineCommand } from "citty";
import path from "node:path";
import { NotFoundError, StorageError } from "../errors.ts";
import { readDeadLetters } from "../outbox/inspect.ts";
import { Outbox, type DeadLetter } from "../outbox/outbox.ts";
import { jsonArg, locationArgs, logArgs, parseSeq, rowArgs } from "./_args.ts";
import { log } from "./_context.ts";
import { oneLine, print, renderFields, renderTable, redact } from "./_output.ts";
import { isDir, namespaceFile, requireOutboxNamespace, resolveLocations, withAccessHint, type Locations } from "./_targets.ts";

/** One dead letter in `dead-letter list/show --json`: where it lives plus the record (errors masked). */
export interface DeadLetterEntry extends DeadLetter {
  app: string | null;
  dbDir: string;
}

/**
 * Reads every dead letter of every location read-only, optionally of one namespace. A file that
 * cannot be read is logged and skipped; the command then exits 1 after printing the rest.
 */
export function collectDeadLetters(locations: Locations, namespace?: string): { entries: DeadLetterEntry[]; unreadable: string[] } {
  const out: DeadLetterEntry[] = [];
  const unreadable: string[] = [];
  const onError = (file: string, err: Error) => {
    unreadable.push(file);
    log().error(withAccessHint(err.message, file));
  };
  for (const loc of locations.dirs) {
    if (!isDir(loc.dbDir)) continue;
    for (const d of readDeadLetters(loc.dbDir, { onError })) {
      if (namespace !== undefined && d.namespace !== namespace) continue;
      const error = d.error === null ? null : redact(d.error, locations.secrets);
      out.push({ app: loc.app, dbDir: loc.dbDir, ...d, error });
    }
  }
  return { entries: out, unreadable };
}

function failIfUnreadable(unreadable: readonly string[]): void {
  if (unreadable.length > 0) throw new StorageError(`dead-letter could not read ${unreadable.length} file(s)`, unreadable[0]!);
}

/** The human list: one aligned row per dead letter. */
export function renderDeadLetters(entries: readonly DeadLetterEntry[]): string {
  if (entries.length === 0) return "no dead letters";
  const withApp = entries.some((e) => e.app !== null);
  return renderTable(
    [
      ...(withApp ? [{ header: "app" }] : []),
      { header: "namespace" },
      { header: "seq", right: true },
      { header: "reason" },
      { header: "attempts", right: true },
      { header: "dead at" },
      { header: "replayed as", right: true },
      { header: "error" },
    ],
    entries.map((e) => [
      ...(withApp ? [e.app ?? "-"] : []),
      e.namespace,
      String(e.seq),
      e.reason,
      String(e.attempts),
      e.deadAt,
      e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq),
      oneLine(e.error, 50),
    ]),
  );
}

/** The human view of one dead letter: every field, the SQL and its arguments in full. */
export function renderDeadLetter(e: DeadLetterEntry): string {
  return renderFields([
    ["namespace", e.namespace],
    ["seq", String(e.seq)],
    ["file", path.join(e.dbDir, `${e.namespace}.db`)],
    ["source", e.source || "-"],
    ["created at", e.createdAt],
    ["dead at", e.deadAt],
    ["reason", e.reason],
    ["attempts", String(e.attempts)],
    ["error class", e.errorClass ?? "-"],
    ["error", e.error ?? "-"],
    ["prev seq", e.prevSeq === null ? "-" : String(e.prevSeq)],
    ["replayed at", e.replayedAt ?? "-"],
    ["replayed as", e.replayedAsSeq === null ? "-" : String(e.replayedAsSeq)],
    ["sql", e.tag],
    ["args", e.payload],
  ]);
}

const list = defineCommand({
  meta: { name: "list", description: "List quarantined rows (read-only)" },
  args: {
    ...locationArgs,
    namespace: { type: "string", valueHint: "N", description: "Only this namespace" },
    ...jsonArg,
    ...logArgs,
  },
  async run({ args }) {
    const { entries, unreadable } = collectDeadLetters(await resolveLocations(args), args.namespace);
    const none = unreadable.length > 0 ? "no dead letters in the readable files" : "no dead letters";
    print(args.json ? JSON.stringify({ deadLetters: entries }, null, 2) : entries.length === 0 ? none : renderDeadLetters(entries));
    failIfUnreadable(unreadable);
  },
});

const show = defineCommand({
  meta: { name: "show", description: "Show one quarantined row in full (read-only)" },
  args: { ...locationArgs, ...rowArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const seq = parseSeq(args.seq);
    const locations = await resolveLocations(args);
    const { location } = namespaceFile(locations, args.namespace, args.app);
    const { entries, unreadable } = collectDeadLetters({ ...locations, dirs: [location] }, args.namespace);
    failIfUnreadable(unreadable);
    const entry = entries.find((e) => e.seq === seq);
    if (!entry) throw new NotFoundError(`no dead letter with seq ${seq} in namespace "${args.namespace}" (${location.dbDir})`);
    print(args.json ? JSON.stringify(entry, null, 2) : renderDeadLetter(entry));
  },
});

const replay = defineCommand({
  meta: { name: "replay", description: "Re-enqueue a quarantined row at the tail of its namespace (safe while the drain runs)" },
  args: { ...locationArgs, ...rowArgs, ...jsonArg, ...logArgs },
  async run({ args }) {
    const seq = parseSeq(args.seq);
    const { file } = namespaceFile(await resolveLocations(args), args.namespace, args.app);
    requireOutboxNamespace(file, args.namespace);
    const outbox = new Outbox(file, args.namespace);
    let newSeq: number;
    try {
      newSeq = outbox.replayDead(seq);
    } finally {
      outbox.close();
    }
    if (args.json) print(JSON.stringify({ action: "replay", namespace: args.namespace, seq, newSeq, file }, null, 2));
    else print(`replayed dead letter ${args.namespace} seq ${seq} as seq ${newSeq} (re-enqueued at the tail, ${file})`);
  },
});

/** `sqloutbox dead-letter list|show|replay`: inspect and replay quarantined rows. */
export const deadLetter = defineCommand({
  meta: { name: "dead-letter", description: "Inspect and replay quarantined rows: list, show, replay" },
  subCommands: { list, show, replay },
});
