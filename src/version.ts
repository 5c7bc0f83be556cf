import pkg from "../package.json" with { type: "json" };

/** The package version; `build.ts` bakes the same value into the compiled binary. */
export const VERSION: string = pkg.version;
