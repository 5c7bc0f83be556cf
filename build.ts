// Compiles the CLI into one self-contained executable: `bun run build` → dist/sqloutbox
// (`bun build.ts OUTFILE` for another path). Tests and bench/cli.ts call buildBinary().
import { VERSION } from "./src/version.ts";

/** Compiles src/cli/bin.ts into `outfile` (the version is baked in through the package.json import). */
export async function buildBinary(outfile: string): Promise<void> {
  const result = await Bun.build({
    entrypoints: [new URL("./src/cli/bin.ts", import.meta.url).pathname],
    compile: {
      outfile,
      // A deployed daemon must not pick up a bunfig.toml or .env from whatever directory it is started in.
      autoloadBunfig: false,
      autoloadDotenv: false,
      autoloadTsconfig: false,
      autoloadPackageJson: false,
    },
    minify: true,
    sourcemap: "linked",
  });
  if (!result.success) {
    throw new Error(`build failed:\n${result.logs.map(String).join("\n")}`);
  }
}

if (import.meta.main) {
  const outfile = process.argv[2] ?? "dist/sqloutbox";
  await buildBinary(outfile);
  console.log(`built ${outfile} (sqloutbox ${VERSION})`);
}
