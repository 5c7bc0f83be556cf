// Compiles the CLI into one self-contained executable: dist/sqloutbox.
import { VERSION } from "./src/version.ts";

const outfile = process.argv[2] ?? "dist/sqloutbox";
const result = await Bun.build({
  entrypoints: ["./src/cli/bin.ts"],
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
  for (const log of result.logs) console.error(log);
  process.exit(1);
}
console.log(`built ${outfile} (sqloutbox ${VERSION})`);
