// Compiles the CLI into one self-contained executable: `bun run build` → dist/sqloutbox
// (`bun build.ts OUTFILE` for another path). `bun run build --release` cross-compiles every
// RELEASE_TARGETS entry into dist/release/ with a SHA256SUMS (`bun build.ts --release OUTDIR`
// for another directory). `bun build.ts --types` writes the library's declarations into
// dist/types/ — `bun pm pack` and `bun publish` run it as the prepack script, so a release step
// needs nothing more (not `--ignore-scripts`). test/binary-smoke.test.ts, test/ops-systemd-sandbox.test.ts
// and bench/cli.ts import buildBinary(); test/binary-release.test.ts imports RELEASE_TARGETS and runs
// `bun run build --release`; buildRelease() and buildTypes() are called only from the command line below.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
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
    // The tracing worker is a second entry point, embedded at ops/tracing/worker.js under the root:
    // where `new Worker(...)` in src/ops/tracing/tracing.ts looks for it in the executable.
    entrypoints: [
      new URL("./src/cli/bin.ts", import.meta.url).pathname,
      new URL("./src/ops/tracing/worker.ts", import.meta.url).pathname,
    ],
    root: new URL("./src", import.meta.url).pathname,
    compile: {
      outfile,
      ...(target ? { target } : {}),
      // A deployed daemon must not pick up a bunfig.toml or .env from whatever directory it is started in.
      autoloadBunfig: false,
      autoloadDotenv: false,
      autoloadTsconfig: false,
      // On: without it the binary's resolver reads no package.json at all, so a writer_class module
      // cannot import a package ("sqloutbox", "smol-toml") from its project's node_modules — only
      // relative and node: imports load. With it a writer resolves its imports as `bun` would.
      autoloadPackageJson: true,
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
export async function buildRelease(
  outDir: string,
  targets: readonly ReleaseTarget[] = RELEASE_TARGETS,
): Promise<ReleaseArtifact[]> {
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
    // The executable carries its own source maps; the side files (its own, the tracing worker's) are not release assets.
    for (const f of fs.readdirSync(outDir)) if (f.endsWith(".map")) fs.rmSync(path.join(outDir, f), { force: true });
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

const ROOT = path.dirname(fileURLToPath(import.meta.url));

// A relative import as tsc writes it into a declaration (`from "./errors.ts"`, `import("../vocabulary.ts")`).
const TS_SPECIFIER = /(\bfrom\s*|\bimport\s*\(\s*)(["'])(\.{1,2}\/[^"'\n]*)\.ts\2/g;

/**
 * Writes the declarations of src/index.ts and every module it reaches (tsconfig.types.json) into
 * `outDir`, with relative imports ending in `.js` — the form every TypeScript resolution mode maps
 * to the sibling .d.ts — so a consumer's tsc needs no allowImportingTsExtensions. Fails on a type
 * error in those sources. Returns the declaration files and their maps, relative to `outDir`.
 */
export function buildTypes(outDir = path.join(ROOT, "dist", "types")): string[] {
  fs.mkdirSync(path.dirname(outDir), { recursive: true });
  // tsc emits into a staging directory beside outDir (same depth, so the maps' relative source
  // paths hold), then changed files are renamed into place one by one: two packs running at once
  // in one working tree must never see outDir emptied or a file half written.
  const staging = fs.mkdtempSync(path.join(path.dirname(outDir), ".types-"));
  try {
    const tsc = Bun.spawnSync(
      [
        path.join(ROOT, "node_modules", ".bin", "tsc"),
        "-p",
        path.join(ROOT, "tsconfig.types.json"),
        "--outDir",
        staging,
      ],
      {
        cwd: ROOT,
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    if (tsc.exitCode !== 0)
      throw new Error(`declaration build failed:\n${tsc.stdout.toString()}${tsc.stderr.toString()}`);
    const files = fs
      .readdirSync(staging, { recursive: true, encoding: "utf8" })
      .filter((f) => f.endsWith(".d.ts") || f.endsWith(".d.ts.map"));
    for (const file of files) {
      const text = fs.readFileSync(path.join(staging, file), "utf8");
      // ".ts" → ".js" keeps every column, so the declaration maps stay exact.
      const shipped = file.endsWith(".d.ts") ? text.replace(TS_SPECIFIER, "$1$2$3.js$2") : text;
      const dest = path.join(outDir, file);
      if (fs.existsSync(dest) && fs.readFileSync(dest, "utf8") === shipped) continue;
      fs.mkdirSync(path.dirname(dest), { recursive: true });
      fs.writeFileSync(`${dest}.${process.pid}.tmp`, shipped);
      fs.renameSync(`${dest}.${process.pid}.tmp`, dest);
    }
    // A declaration of a module src/index.ts no longer reaches must not ship.
    const keep = new Set(files);
    for (const file of fs.readdirSync(outDir, { recursive: true, encoding: "utf8" })) {
      if (/\.d\.ts(\.map)?$/.test(file) && !keep.has(file)) fs.rmSync(path.join(outDir, file), { force: true });
    }
    return files;
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const release = args.includes("--release");
  const types = args.includes("--types");
  const rest = args.filter((a) => a !== "--release" && a !== "--types");
  if (rest.length > 1 || rest.some((a) => a.startsWith("-")) || (release && types)) {
    console.error(
      "usage: bun build.ts [OUTFILE]\n       bun build.ts --release [OUTDIR]\n       bun build.ts --types [OUTDIR]",
    );
    process.exit(2);
  }
  if (types) {
    const outDir = rest[0] ?? path.join(ROOT, "dist", "types");
    // stderr: as the prepack script this runs inside `bun pm pack --quiet`, whose stdout is the tarball's name.
    console.error(`wrote ${buildTypes(outDir).length} declaration files into ${outDir}`);
  } else if (release) {
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
