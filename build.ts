// Compiles the CLI into one self-contained executable: `bun run build` → dist/sqloutbox
// (`bun build.ts OUTFILE` for another path). `bun run build --release` cross-compiles every
// RELEASE_TARGETS entry into dist/release/ with a SHA256SUMS (`bun build.ts --release OUTDIR`
// for another directory). Tests and bench/cli.ts call buildBinary() and buildRelease().
import fs from "node:fs";
import path from "node:path";
import { VERSION } from "./src/version.ts";

/** One release executable: its file-name suffix and the Bun runtime it is compiled against. */
export interface ReleaseTarget {
  name: string;
  target: Bun.Build.CompileTarget;
}

/** The servers people have; Bun downloads each runtime from the npm registry on first use and caches it. */
export const RELEASE_TARGETS: readonly ReleaseTarget[] = [
  { name: "linux-x64", target: "bun-linux-x64" },
  { name: "linux-x64-musl", target: "bun-linux-x64-musl" },
  { name: "linux-arm64", target: "bun-linux-arm64" },
  { name: "darwin-arm64", target: "bun-darwin-arm64" },
];

/**
 * Compiles src/cli/bin.ts into `outfile` (the version is baked in through the package.json import).
 * Without `target` the executable is for this machine.
 */
export async function buildBinary(outfile: string, target?: Bun.Build.CompileTarget): Promise<void> {
  const result = await Bun.build({
    entrypoints: [new URL("./src/cli/bin.ts", import.meta.url).pathname],
    compile: {
      outfile,
      ...(target ? { target } : {}),
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
    throw new Error(`build failed${target ? ` for ${target}` : ""}:\n${result.logs.map(String).join("\n")}`);
  }
}

/** A built release executable: its file name in the release directory and its sha256 (hex). */
export interface ReleaseArtifact {
  file: string;
  sha256: string;
}

/**
 * Empties `outDir`, compiles `sqloutbox-<name>` for every target into it and writes SHA256SUMS
 * in `sha256sum` format, so `sha256sum -c SHA256SUMS` run there checks the download.
 */
export async function buildRelease(outDir: string, targets: readonly ReleaseTarget[] = RELEASE_TARGETS): Promise<ReleaseArtifact[]> {
  // A binary left from an earlier release (or a dropped target) must not ship beside the new ones.
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.mkdirSync(outDir, { recursive: true });
  const artifacts: ReleaseArtifact[] = [];
  // One at a time: on two cores a parallel build took no less time (~6 s either way, runtimes cached),
  // and a failure here names its target.
  for (const { name, target } of targets) {
    const file = `sqloutbox-${name}`;
    const outfile = path.join(outDir, file);
    await buildBinary(outfile, target);
    // The executable carries its own source map; the side file is not a release asset.
    fs.rmSync(`${outfile}.map`, { force: true });
    artifacts.push({ file, sha256: await sha256File(outfile) });
  }
  fs.writeFileSync(path.join(outDir, "SHA256SUMS"), artifacts.map((a) => `${a.sha256}  ${a.file}\n`).join(""));
  return artifacts;
}

async function sha256File(file: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  for await (const chunk of Bun.file(file).stream()) hasher.update(chunk);
  return hasher.digest("hex");
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const release = args.includes("--release");
  const rest = args.filter((a) => a !== "--release");
  if (rest.length > 1 || rest.some((a) => a.startsWith("-"))) {
    console.error("usage: bun build.ts [OUTFILE]\n       bun build.ts --release [OUTDIR]");
    process.exit(2);
  }
  if (release) {
    const outDir = rest[0] ?? "dist/release";
    const artifacts = await buildRelease(outDir);
    for (const a of artifacts) console.log(`built ${path.join(outDir, a.file)}`);
    console.log(`wrote ${path.join(outDir, "SHA256SUMS")} (sqloutbox ${VERSION})`);
  } else {
    const outfile = rest[0] ?? "dist/sqloutbox";
    await buildBinary(outfile);
    console.log(`built ${outfile} (sqloutbox ${VERSION})`);
  }
}
