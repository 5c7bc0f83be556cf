// Private PostgreSQL and MariaDB servers for `bench:drain pinned`: each in a temp directory of its
// own, on a free port, pinned to the CPUs given (taskset), stopped and removed by `stop()` — also
// on exit and on SIGINT/SIGTERM, so a failed run leaves no server behind. The servers of this
// machine (5432, 3306) are not touched. As root, the servers run as the `postgres` / `mysql` user
// (initdb refuses root).
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** A running private server: its URL for the writers, and how to stop it (idempotent, synchronous). */
export interface PrivateServer {
  engine: "postgres" | "mysql";
  url: string;
  stop(): void;
}

const running = new Set<PrivateServer>();
let hooked = false;

/** Stops every private server still running; registered once for exit and the stop signals. */
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  const stopAll = () => {
    for (const server of [...running]) server.stop();
  };
  process.on("exit", stopAll);
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(signal, () => {
      stopAll();
      process.exit(130);
    });
  }
}

const isRoot = () => process.getuid?.() === 0;

function run(argv: string[], what: string, user?: string): SpawnSyncReturns<string> {
  const command = user && isRoot() ? ["runuser", "-u", user, "--", ...argv] : argv;
  const out = spawnSync(command[0]!, command.slice(1), { encoding: "utf8" });
  if (out.error || out.status !== 0)
    throw new Error(
      `${what} failed (${command.join(" ")}): ${out.error?.message ?? `exit ${out.status}`}\n${out.stdout}${out.stderr}`,
    );
  return out;
}

/** A port nobody listens on now (the server binds it right after). */
async function freePort(): Promise<number> {
  const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = server.port;
  server.stop(true);
  return port;
}

function tempDirFor(user: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `sqloutbox-bench-${user}-`));
  if (isRoot()) run(["chown", user, dir], `chown ${dir}`);
  return dir;
}

/** The directory of PostgreSQL's server binaries (the newest under /usr/lib/postgresql), or null. */
function postgresBin(): string | null {
  const root = "/usr/lib/postgresql";
  if (!fs.existsSync(root)) return null;
  const versions = fs
    .readdirSync(root)
    .filter((v) => fs.existsSync(`${root}/${v}/bin/initdb`))
    .sort((a, b) => Number(b) - Number(a));
  return versions.length > 0 ? `${root}/${versions[0]}/bin` : null;
}

async function waitUntil(ready: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await ready())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(100);
  }
}

/** A private PostgreSQL cluster (initdb, trust auth, user postgres) on CPUs `cpus`. Throws when it cannot be started. */
export async function startPostgres(cpus: string): Promise<PrivateServer> {
  const bin = postgresBin();
  if (!bin) throw new Error("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin");
  hookExit();
  const dir = tempDirFor("postgres");
  const data = `${dir}/data`;
  const port = await freePort();
  const pgCtl = (...args: string[]) => run([`${bin}/pg_ctl`, "-D", data, ...args], "pg_ctl", "postgres");
  let started = false;
  const server: PrivateServer = {
    engine: "postgres",
    url: `postgres://postgres@127.0.0.1:${port}`,
    stop() {
      if (!running.delete(server) && !started) return;
      started = false;
      try {
        if (fs.existsSync(`${data}/postmaster.pid`)) pgCtl("-m", "immediate", "-w", "stop");
      } catch (error) {
        console.error(`bench: stopping the private PostgreSQL in ${dir}: ${(error as Error).message}`);
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  running.add(server);
  try {
    run([`${bin}/initdb`, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"], "initdb", "postgres");
    started = true;
    // taskset before pg_ctl: the postmaster and every backend it forks inherit the CPUs.
    run(
      [
        "taskset",
        "-c",
        cpus,
        `${bin}/pg_ctl`,
        "-D",
        data,
        "-l",
        `${dir}/server.log`,
        "-o",
        `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`,
        "-w",
        "start",
      ],
      "pg_ctl start",
      "postgres",
    );
  } catch (error) {
    server.stop();
    throw error;
  }
  return server;
}

/** A private MariaDB server (root without a password over TCP) on CPUs `cpus`. Throws when it cannot be started. */
export async function startMariadb(cpus: string): Promise<PrivateServer> {
  const installer = Bun.which("mariadb-install-db");
  const daemon = Bun.which("mariadbd") ?? (fs.existsSync("/usr/sbin/mariadbd") ? "/usr/sbin/mariadbd" : null);
  if (!installer || !daemon) throw new Error("no mariadb-install-db / mariadbd on this machine");
  hookExit();
  const dir = tempDirFor("mysql");
  const data = `${dir}/data`;
  const port = await freePort();
  const user = isRoot() ? ["--user=mysql"] : [];
  // Its temporary files in its own directory: by default InnoDB creates them in $TMPDIR, which the
  // mysql user may not write (under `bun test` it is the run's directory, root's).
  const tmpdir = `--tmpdir=${dir}`;
  let proc: ReturnType<typeof Bun.spawn> | null = null;
  const server: PrivateServer = {
    engine: "mysql",
    url: `mysql://root@127.0.0.1:${port}`,
    stop() {
      if (!running.delete(server)) return;
      // A benchmark's data: no clean shutdown needed. The files go at once (Linux removes open files too).
      if (proc && proc.exitCode === null) proc.kill("SIGKILL");
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  running.add(server);
  try {
    run(
      [
        installer,
        "--no-defaults",
        ...user,
        `--datadir=${data}`,
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        tmpdir,
      ],
      "mariadb-install-db",
    );
    proc = Bun.spawn(
      [
        "taskset",
        "-c",
        cpus,
        daemon,
        "--no-defaults",
        ...user,
        `--datadir=${data}`,
        `--socket=${dir}/mysqld.sock`,
        `--port=${port}`,
        "--bind-address=127.0.0.1",
        `--pid-file=${dir}/mysqld.pid`,
        `--log-error=${dir}/server.log`,
        "--skip-name-resolve",
        tmpdir,
      ],
      { stdout: "ignore", stderr: "ignore" },
    );
    const { SQL } = await import("bun");
    await waitUntil(async () => {
      if (proc!.exitCode !== null)
        throw new Error(
          `mariadbd exited ${proc!.exitCode}: ${fs.readFileSync(`${dir}/server.log`, "utf8").slice(-2000)}`,
        );
      const sql = new SQL(`${server.url}/mysql`, { max: 1, connectionTimeout: 1 });
      try {
        await sql.unsafe("SELECT 1");
        return true;
      } catch {
        return false;
      } finally {
        await sql.close().catch(() => {});
      }
    }, `MariaDB on port ${port}`);
  } catch (error) {
    server.stop();
    throw error;
  }
  return server;
}
