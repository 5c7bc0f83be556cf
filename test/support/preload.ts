// Loaded before every test file (bunfig.toml [test] preload); its hooks wrap the whole run.
import { afterAll } from "bun:test";
import { createDatabasesAhead, settleServerDbs } from "./server-db.ts";

createDatabasesAhead();
afterAll(settleServerDbs);
