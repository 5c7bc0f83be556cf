// A host of the simulated fleet: its queue folder (a db_dir, or one db_file), its producer, and the
// drain process running on it — the real OutboxSyncService on a virtual scheduler, a simulated
// writer, the world's locks and file watches — which the world may crash (abandon mid-flight: its
// events, answers and watches die, its files and locks are let go, as a dead process's are) and
// start again over the same files.
import { Database } from "bun:sqlite";
import path from "node:path";
import { defineConfig } from "../../src/config/define.ts";
import type { OutboxConfig } from "../../src/config/types.ts";
import type { DrainLock } from "../../src/drain/lock.ts";
import { OutboxSyncService } from "../../src/drain/service.ts";
import type { DirWatch } from "../../src/drain/wake.ts";
import type { Logger } from "../../src/logger.ts";
import { SQLMiddleware } from "../../src/outbox/middleware.ts";
import type { HostView } from "./checkers.ts";
import type { Random } from "./random.ts";
import { EPOCH_MS, ProcessScheduler, type SimTime } from "./time.ts";
import type { Trace } from "./trace.ts";
import { remotePath } from "./remote.ts";
import { SimTenantWriters, SimWriter, type WriterWorld } from "./writer.ts";

/** What a host's drain is tuned with (defineConfig's keys, in their units). */
export interface Tuning {
  batchSize: number;
  flushInterval: number;
  tableFlushThreshold: number;
  maxAttempts: number;
  backoffUnitSeconds: number;
  backoffCapMinutes: number;
  outageBackoffCapMinutes: number;
  writeTimeout: number;
  cleanupEvery: number;
  connections: number;
  concurrent: boolean;
  pipelined: boolean;
  /** With tenants: how many tenant databases its drain holds open at once. */
  maxOpenTenants?: number;
}

/** What the world gives its hosts' drains. */
export interface HostWorld extends WriterWorld {
  trace: Trace;
  watches: DirWatches;
  /** Lock file → the process holding it. */
  locks: Map<string, DrainProcess>;
  /** A random stream of its own for each new process (its writer's faults, its retry jitter). */
  stream(): Random;
}

/** The directory watches of every drain process, fed by the world as producers commit. */
export class DirWatches {
  readonly #byDir = new Map<string, Set<{ owner: DrainProcess; onChange: (name: string | null) => void }>>();

  /** The DirWatch one process's drain uses. */
  for(owner: DrainProcess): DirWatch {
    return (dir, onChange) => {
      const entry = { owner, onChange };
      const set = this.#byDir.get(dir) ?? new Set();
      this.#byDir.set(dir, set);
      set.add(entry);
      return { close: () => void set.delete(entry) };
    };
  }

  /** A commit to `file`: each live watcher of its directory hears of its WAL's change soon — unless the report is lost (`drop`). */
  committed(file: string, time: SimTime, random: Random, drop: number): void {
    const set = this.#byDir.get(path.dirname(file));
    if (!set) return;
    for (const entry of set) {
      if (!entry.owner.alive || random.chance(drop)) continue;
      time.after(random.int(0, 3), () => entry.onChange(`${path.basename(file)}-wal`), entry.owner);
    }
  }
}

export class Host implements HostView {
  readonly tables: ReadonlyArray<{ name: string; lanes: number; file: string }>;
  readonly config: OutboxConfig;
  readonly producer: SQLMiddleware;
  readonly maxAttempts: number | null;
  readonly batchSize: number;
  readonly target: string;
  process: DrainProcess | null = null;
  /** When the host's drain was last disturbed, or will be undisturbed again (see HostView.calmSince). */
  calmSince = 0;
  #incarnations = 0;
  readonly #reads = new Map<string, Database>();

  constructor(
    readonly index: number,
    readonly dir: string,
    readonly dbFile: boolean,
    tables: ReadonlyArray<{ name: string; lanes: number }>,
    readonly tuning: Tuning,
    /** The tenants its rows go to, each its own database (none: the one remote). */
    readonly tenants: readonly string[] = [],
  ) {
    const queue = path.join(dir, `host${index}`);
    const file = path.join(queue, "outbox.db");
    this.tables = tables.map((t) => ({ ...t, file: dbFile ? file : path.join(queue, `${t.name}.db`) }));
    const app = `h${index}`;
    this.target = `${app}.main`;
    this.config = defineConfig({
      app: {
        [app]: {
          ...(dbFile ? { dbFile: file } : { dbDir: queue }),
          batchSize: tuning.batchSize,
          flushInterval: tuning.flushInterval,
          tableFlushThreshold: tuning.tableFlushThreshold,
          tableMaxWait: 0,
          maxAttempts: tuning.maxAttempts,
          backoffUnitSeconds: tuning.backoffUnitSeconds,
          backoffCapMinutes: tuning.backoffCapMinutes,
          outageBackoffCapMinutes: tuning.outageBackoffCapMinutes,
          writeTimeout: tuning.writeTimeout,
          cleanupEvery: tuning.cleanupEvery,
          retainLogDays: 1,
          db: {
            main: {
              writer: "sqlite",
              connection: { path: remotePath(dir, tenants.length > 0) },
              tables: tables.map((t) => ({ name: t.name, lanes: t.lanes })),
              connections: tuning.connections,
              ...(tuning.maxOpenTenants === undefined ? {} : { maxOpenTenants: tuning.maxOpenTenants }),
            },
          },
        },
      },
    });
    const appConfig = this.config.apps[0]!;
    this.maxAttempts = appConfig.maxAttempts;
    this.batchSize = appConfig.batchSize;
    this.producer = new SQLMiddleware(dbFile ? { dbFile: file } : { dbDir: queue });
    for (const t of tables) this.producer.outbox(t.name); // the producer creates the files; a drain never does
  }

  /** The drain is disturbed until `until` (virtual ms): no lane is expected to advance before. */
  disturbed(until: number): void {
    this.calmSince = Math.max(this.calmSince, until);
  }

  get concurrent(): boolean {
    return this.tuning.concurrent;
  }

  get live(): boolean {
    return this.process?.alive === true;
  }

  fileOf(table: string): string {
    return this.tables.find((t) => t.name === table)!.file;
  }

  /** The queue files, each once. */
  get files(): string[] {
    return [...new Set(this.tables.map((t) => t.file))];
  }

  read(file: string): Database {
    let db = this.#reads.get(file);
    if (!db) {
      db = new Database(file, { readonly: true });
      this.#reads.set(file, db);
    }
    return db;
  }

  /** Rows still in a table's queue. */
  pending(table: string): number {
    return this.read(this.fileOf(table))
      .query<{ n: number }, [string]>("SELECT count(*) AS n FROM outbox_queue WHERE namespace = ? AND synced = 0")
      .get(table)!.n;
  }

  /** Lines for a failure's trace: what each queue holds now (its first rows), and the drain's view of its tables. */
  describe(): string[] {
    const lines: string[] = [];
    const at = (next: string | null) => (next === null ? "" : ` next +${Date.parse(next) - EPOCH_MS}`);
    for (const file of this.files) {
      try {
        const rows = this.read(file)
          .query<
            { seq: number; ns: string; key: string | null; grp: number | null; attempts: number; next: string | null },
            []
          >(
            "SELECT seq, namespace AS ns, lane_key AS key, grp, attempts, next_attempt_at AS next FROM outbox_queue WHERE synced = 0 ORDER BY seq LIMIT 40",
          )
          .all();
        const text = rows.map(
          (r) =>
            `${r.ns}#${r.seq}${r.key === null ? "" : `/${r.key}`}${r.grp === null ? "" : ` g${r.grp}`}${r.attempts ? ` a${r.attempts}` : ""}${at(r.next)}`,
        );
        lines.push(`h${this.index} queue: ${text.join(", ") || "empty"}`);
      } catch (error) {
        lines.push(`h${this.index} queue: unreadable: ${(error as Error).message}`);
      }
    }
    if (!this.live) return lines;
    for (const view of this.process!.service.views()) {
      const tables = view.tables.map((t) => {
        const held = t.held === null ? "" : ` held (${t.held.reason})`;
        const lanes = t.lanes?.held.length
          ? ` lanes held ${t.lanes.held.map((l) => `${l.lane}@${l.seq}`).join(",")}`
          : "";
        return `${t.namespace} through ${t.through}${held}${lanes}`;
      });
      lines.push(`h${this.index} drain: ${view.state}, ${view.batchesInFlight} in flight; ${tables.join("; ")}`);
    }
    return lines;
  }

  /** Starts a new drain process over the host's files. */
  start(world: HostWorld): DrainProcess {
    const proc = new DrainProcess(world, this, ++this.#incarnations);
    this.process = proc;
    this.disturbed(world.time.now);
    proc.start();
    return proc;
  }

  close(): void {
    for (const db of this.#reads.values()) db.close();
    this.#reads.clear();
  }
}

/** One run of a host's drain: the real service, with everything that waits or talks to the world simulated. */
export class DrainProcess {
  alive = true;
  readonly name: string;
  readonly service: OutboxSyncService;
  readonly writer: SimWriter | SimTenantWriters;
  readonly #locks = new Set<string>();
  #stopping: Promise<void> | null = null;

  constructor(
    private readonly world: HostWorld,
    readonly host: Host,
    incarnation: number,
  ) {
    this.name = `h${host.index}#${incarnation}`;
    const random = world.stream();
    const { tuning } = host;
    const options = { connections: tuning.connections, concurrent: tuning.concurrent, pipelined: tuning.pipelined };
    this.writer =
      host.tenants.length > 0
        ? new SimTenantWriters(world, this, host.index, random.fork(1), options)
        : new SimWriter(world, this, host.index, random.fork(1), options);
    this.service = new OutboxSyncService(
      host.config,
      { [host.target]: this.writer },
      {
        scheduler: new ProcessScheduler(world.time, this, random.fork(2)),
        watch: world.watches.for(this),
        lock: (lockFile) => this.#lock(lockFile),
        logger: traceLogger(world.trace, this),
      },
    );
  }

  start(): void {
    this.world.trace.add(`${this.name} starts`);
    this.service.start().catch((error: unknown) => {
      if (this.alive) this.world.trace.add(`${this.name} start failed: ${(error as Error).message}`);
    });
  }

  /**
   * Dies between two events: its timers and answers never come, its batches still on the way land
   * or not (see SimWriter.crashed), and what the OS would close is closed — its connections to the
   * queue files, its locks, its watches. Nothing is confirmed, nothing is stopped cleanly.
   */
  crash(): void {
    this.alive = false;
    this.world.trace.add(`${this.name} crashes`);
    this.writer.crashed();
    const open = new Set<{ close(): void }>();
    for (const runner of this.service.targets())
      for (const table of runner.tables) {
        const file = table.openFile();
        if (file !== null) open.add(file);
      }
    for (const file of open) file.close(); // its statements and its connection; nothing confirmed, no checkpoint of ours
    for (const lockFile of this.#locks) if (this.world.locks.get(lockFile) === this) this.world.locks.delete(lockFile);
    this.#locks.clear();
  }

  /** Stops cleanly (as on SIGTERM): the in-flight batches settle, the rows applied are confirmed. */
  stop(): Promise<void> {
    this.#stopping ??= this.service.stop().then(() => {
      this.alive = false;
      this.world.trace.add(`${this.name} stopped`);
    });
    return this.#stopping;
  }

  #lock(lockFile: string): DrainLock {
    const holder = this.world.locks.get(lockFile);
    if (holder !== undefined && holder !== this && holder.alive)
      throw new Error(`sim: ${this.name} wants ${lockFile}, held by ${holder.name}: two drains on one location`);
    this.world.locks.set(lockFile, this);
    this.#locks.add(lockFile);
    return {
      lockFile,
      release: () => {
        if (this.world.locks.get(lockFile) === this) this.world.locks.delete(lockFile);
        this.#locks.delete(lockFile);
      },
    };
  }
}

/** The drain's log, at info and above (debug too with SQLOUTBOX_SIM_DEBUG=1), into the trace (while the process lives). */
function traceLogger(trace: Trace, proc: DrainProcess): Logger {
  const line = (level: string) => (message: string) => {
    if (proc.alive) trace.add(`${proc.name} ${level} ${message}`, true);
  };
  const debug = process.env.SQLOUTBOX_SIM_DEBUG === "1" ? line("debug") : () => {};
  return { debug, info: line("info"), warn: line("warn"), error: line("error") };
}
