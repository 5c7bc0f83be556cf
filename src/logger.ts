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
