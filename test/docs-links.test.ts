// The README and docs/ link into each other and into the repository, and the shipped alert rules
// link into the runbook: every relative link must reach an existing file, and every #anchor a
// heading of its target, as GitHub renders them. A renamed heading or a moved file fails here.
import { describe, expect, test } from "bun:test";
import fs from "node:fs";
import path from "node:path";

const ROOT = path.resolve(import.meta.dir, "..");
const DOCS = [
  "README.md",
  ...fs
    .readdirSync(path.join(ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .sort()
    .map((f) => `docs/${f}`),
];
const ALERTS = "etc/prometheus/sqloutbox-alerts.yml";

/** The text outside fenced code blocks, line by line (a `# comment` in a shell block is no heading). */
function proseLines(markdown: string): string[] {
  const out: string[] = [];
  let fence: string | null = null;
  for (const line of markdown.split("\n")) {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker && (fence === null || marker.startsWith(fence))) {
      fence = fence === null ? marker : null;
      continue;
    }
    if (fence === null) out.push(line);
  }
  return out;
}

/** GitHub's anchor for a heading: lowercase, punctuation dropped (`-` and `_` kept), each space a `-`. */
function slug(heading: string): string {
  const text = heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1") // a link shows its text
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, "").replace(/ /g, "-");
}

/** Every anchor a Markdown file offers: one per heading, repeats numbered `-1`, `-2`, … as GitHub does. */
function anchors(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of proseLines(fs.readFileSync(path.join(ROOT, file), "utf8"))) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The link targets of a Markdown file, outside code blocks and code spans, with their line. */
function links(file: string): Array<{ target: string; line: number }> {
  const out: Array<{ target: string; line: number }> = [];
  const text = fs.readFileSync(path.join(ROOT, file), "utf8");
  let fence: string | null = null;
  text.split("\n").forEach((line, i) => {
    const marker = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker && (fence === null || marker.startsWith(fence))) {
      fence = fence === null ? marker : null;
      return;
    }
    if (fence !== null) return;
    const prose = line.replace(/`[^`]*`/g, "code"); // `[a](b)` inside a code span is no link
    for (const m of prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      out.push({ target: m[1]!, line: i + 1 });
  });
  return out;
}

/** Why `target` (as written in `from`, a repository-relative path) does not resolve, or null. */
function problem(from: string, target: string): string | null {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null; // https:, mailto: … are not ours to check
  const hash = target.indexOf("#");
  const filePart = hash < 0 ? target : target.slice(0, hash);
  const anchor = hash < 0 ? null : decodeURIComponent(target.slice(hash + 1));
  const file =
    filePart === "" ? from : path.relative(ROOT, path.resolve(ROOT, path.dirname(from), decodeURIComponent(filePart)));
  if (file.startsWith("..")) return `${target} leaves the repository`;
  if (!fs.existsSync(path.join(ROOT, file))) return `${target}: ${file} does not exist`;
  if (anchor === null) return null;
  if (!file.endsWith(".md")) return `${target}: an anchor into ${file}, which is not Markdown`;
  return anchors(file).has(anchor) ? null : `${target}: no heading in ${file} has the anchor #${anchor}`;
}

describe("documentation links", () => {
  test("the README and docs/ pages exist where the README says", () => {
    expect(DOCS).toContain("docs/operations.md");
    expect(DOCS.length).toBeGreaterThan(5);
  });

  test.each(DOCS)("every relative link and #anchor in %s resolves", (file) => {
    const found = links(file);
    expect(found.length).toBeGreaterThan(0);
    const broken = found
      .map((l) => ({ ...l, why: problem(file, l.target) }))
      .filter((l) => l.why !== null)
      .map((l) => `${file}:${l.line}: ${l.why}`);
    expect(broken).toEqual([]);
  });

  test("the README stays the front page, under 300 lines, and links every docs/ page", () => {
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
    expect(readme.split("\n").length).toBeLessThanOrEqual(300);
    const linked = new Set(links("README.md").map((l) => l.target.split("#")[0]));
    expect(DOCS.filter((d) => d !== "README.md" && !linked.has(d))).toEqual([]);
  });

  test("measured figures live in docs/benchmarks.md only: the README and the other pages link to it", () => {
    // A throughput, a per-row or per-call cost, a latency percentile: what a benchmark run changes.
    const figure = /\d[\d.,–-]*\s?k?\s?rows\/s|\d[\d.,–-]*\s?µs|\d[\d.,–-]*\s?ms (?:at the median|p50|p99)/;
    const found = DOCS.filter((d) => d !== "docs/benchmarks.md" && d !== "docs/compatibility.md").flatMap((d) =>
      fs
        .readFileSync(path.join(ROOT, d), "utf8")
        .split("\n")
        .flatMap((line, i) => (figure.test(line) ? [`${d}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(found).toEqual([]);
    // compatibility.md quotes the Python reference's figures (from the spec), none of ours.
    expect(fs.readFileSync(path.join(ROOT, "docs/compatibility.md"), "utf8").match(new RegExp(figure, "g"))).toEqual([
      "142 µs",
    ]);
  });

  test("the README's install lines name the tarball `bun pm pack` makes of this version", async () => {
    const { version } = (await import("../package.json", { with: { type: "json" } })).default;
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8");
    expect(readme).toContain(`bun add /path/to/sqloutbox-${version}.tgz`);
    expect(readme).toContain(`sqloutbox-${version}.tgz, type declarations included`);
  });

  test("every command main.ts registers has a section in docs/cli.md and a row in the README's command table", async () => {
    const { main } = await import("../src/cli/main.ts");
    const { subCommandsOf } = await import("../src/cli/command-line.ts");
    const cli = proseLines(fs.readFileSync(path.join(ROOT, "docs/cli.md"), "utf8")).filter((l) => l.startsWith("## `"));
    const readme = fs
      .readFileSync(path.join(ROOT, "README.md"), "utf8")
      .split("\n")
      .filter((l) => l.startsWith("| `sqloutbox "));
    for (const [name] of await subCommandsOf(main)) {
      expect({ name, cli: cli.some((h) => h.startsWith(`## \`${name}`)) }).toEqual({ name, cli: true });
      expect({ name, readme: readme.some((r) => r.startsWith(`| \`sqloutbox ${name}`)) }).toEqual({
        name,
        readme: true,
      });
    }
  });

  test("every alert rule has a runbook_url, and each resolves to a heading of docs/operations.md", () => {
    const rules = fs.readFileSync(path.join(ROOT, ALERTS), "utf8");
    const alerts = [...rules.matchAll(/^\s*- alert:\s*(\S+)/gm)].map((m) => m[1]!);
    const urls = [...rules.matchAll(/^\s*runbook_url:\s*"?([^"\s]+)"?\s*$/gm)].map((m) => m[1]!);
    expect(alerts.length).toBeGreaterThan(0);
    expect(urls.length).toBe(alerts.length);
    for (const url of urls) {
      expect(url.startsWith("docs/operations.md#")).toBe(true);
      expect(problem("README.md", url)).toBeNull(); // relative to the repository root, where the README is
    }
  });

  test("headings become GitHub's anchors", () => {
    expect(slug("Target down")).toBe("target-down");
    expect(slug("`status --json`")).toBe("status---json");
    expect(slug("Compatibility with the Python `sqloutbox` 0.5.0")).toBe("compatibility-with-the-python-sqloutbox-050");
    expect(slug("Drain — `bun run bench:drain`")).toBe("drain--bun-run-benchdrain");
    expect(slug("`inject_outbox_seq`")).toBe("inject_outbox_seq");
  });
});
