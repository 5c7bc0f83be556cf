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
  const wrap = (fn: (message: string, ...rest: unknown[]) => void) => (message: string, ...rest: unknown[]) => {
    const last = rest[rest.length - 1];
    if (isFieldBag(last)) fn(message, ...rest.slice(0, -1), { ...fields, ...last });
    else fn(message, ...rest, { ...fields });
  };
  return { debug: wrap(logger.debug.bind(logger)), info: wrap(logger.info.bind(logger)), warn: wrap(logger.warn.bind(logger)), error: wrap(logger.error.bind(logger)) };
}

/** A plain object of fields (not an Error, an array or a class instance). */
export function isFieldBag(value: unknown): value is LogFields {
  return value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;
}
