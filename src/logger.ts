/** The logging interface the core takes (consola's instances satisfy it). Core modules never import consola. */
export interface Logger {
  debug(message: string, ...rest: unknown[]): void;
  info(message: string, ...rest: unknown[]): void;
  warn(message: string, ...rest: unknown[]): void;
  error(message: string, ...rest: unknown[]): void;
}

const noop = () => {};
/** A logger that discards everything: the default for library use. */
export const silentLogger: Logger = { debug: noop, info: noop, warn: noop, error: noop };

/** Structured fields a log line carries beside its message (JSON logs give each its own key). */
export type LogFields = Record<string, string | number | boolean | null | undefined>;

/**
 * A logger that adds `fields` to every line (merged under the line's own fields, which win): a
 * target's runner logs with its app and target, so a JSON log line names them without the
 * message having to.
 */
export function withFields(logger: Logger, fields: LogFields): Logger {
  const wrap =
    (fn: (message: string, ...rest: unknown[]) => void) =>
    (message: string, ...rest: unknown[]) => {
      const last = rest[rest.length - 1];
      if (isFieldBag(last)) fn(message, ...rest.slice(0, -1), { ...fields, ...last });
      else fn(message, ...rest, { ...fields });
    };
  return {
    debug: wrap(logger.debug.bind(logger)),
    info: wrap(logger.info.bind(logger)),
    warn: wrap(logger.warn.bind(logger)),
    error: wrap(logger.error.bind(logger)),
  };
}

// Symbol.for, so that a logger marked by one copy of this package is recognised by another.
const TAKES_FIELD_BAGS = Symbol.for("sqloutbox.logger.takesFieldBags");

/**
 * Marks `logger` as one that takes a trailing field bag as structured fields (the CLI's consola:
 * its JSON lines give each field its own key) and returns it; `libraryLogger` passes it through.
 */
export function takesFieldBags<T extends Logger>(logger: T): T {
  Object.defineProperty(logger, TAKES_FIELD_BAGS, { value: true });
  return logger;
}

/**
 * The logger the library writes to, made from the one a caller passed: silent for none; a logger
 * marked with `takesFieldBags` as it is; any other gets each line's fields written into the
 * message (`… target=shop.main attempt=2`), because a plain `console` prints an object argument
 * over several lines. The global `console` has no levels of its own: it gets info and above
 * (debug is per-batch detail); pass a logger with levels to see debug.
 */
export function libraryLogger(logger: Logger | undefined): Logger {
  if (logger === undefined) return silentLogger;
  if ((logger as { [TAKES_FIELD_BAGS]?: boolean })[TAKES_FIELD_BAGS]) return logger;
  const inline =
    (fn: (message: string, ...rest: unknown[]) => void) =>
    (message: string, ...rest: unknown[]) => {
      const last = rest[rest.length - 1];
      if (!isFieldBag(last)) return fn(message, ...rest);
      const fields = Object.entries(last)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => `${k}=${fieldText(v)}`);
      fn(fields.length > 0 ? `${message}  ${fields.join(" ")}` : message, ...rest.slice(0, -1));
    };
  return takesFieldBags({
    debug: logger === globalThis.console ? noop : inline(logger.debug.bind(logger)),
    info: inline(logger.info.bind(logger)),
    warn: inline(logger.warn.bind(logger)),
    error: inline(logger.error.bind(logger)),
  });
}

/** A field value as logfmt writes it: bare when it is one word, else quoted. */
function fieldText(value: LogFields[string]): string {
  const text = String(value);
  return /^[^\s"=]+$/.test(text) ? text : JSON.stringify(text);
}

/** A plain object of fields (not an Error, an array or a class instance). */
export function isFieldBag(value: unknown): value is LogFields {
  return value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;
}
