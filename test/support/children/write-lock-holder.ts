// Holds the SQLite write lock of the file argv[2] (BEGIN IMMEDIATE) for argv[3] ms, saying
// "locked" once it has it, then commits and exits: another process mid-write, for the busy tests.
import { Database } from "bun:sqlite";

const db = new Database(process.argv[2]!);
db.run("BEGIN IMMEDIATE");
process.stdout.write("locked\n");
Bun.sleepSync(Number(process.argv[3]));
db.run("COMMIT");
db.close();
