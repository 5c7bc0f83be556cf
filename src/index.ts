export * from "./errors.ts";
export type { Dialect, BindValue, Statement, WriteResult, OutboxWriter } from "./writers/writer.ts";
export { VERSION } from "./version.ts";
export * from "./config/index.ts";
