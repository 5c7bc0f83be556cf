import type { BindValue } from "../../src/vocabulary.ts";

/** A seeded PRNG (mulberry32): the same seed always yields the same statements. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Identifier quoting a generated statement uses; decides which dialects' lexers can read it. */
export type QuoteStyle = "plain" | "double" | "bracket" | "backtick";

/** One generated statement: what the rewriter gets, and what must happen. */
export interface GeneratedStatement {
  sql: string;
  args: BindValue[];
  kind: "insert" | "update";
  /** The table the statement writes (`t`: 5 rows, WHERE picks ≤ 1; `u`: 1 row, no WHERE). */
  table: "t" | "u";
  quote: QuoteStyle;
  /** Set when the statement is of a rejected kind: a substring of the expected `reason`. */
  rejectReason?: string;
}

const MARK = "\u0001"; // stands for a placeholder until numbering is decided
const COLUMNS = ["a", "b", "c", "d", "e"] as const;
const GAPS = [" ", " ", " ", "  ", "\n", "\t", "\r\n  ", " /* ? ) WHERE ; ' */ ", " -- ?) WHERE; 'x\n"];
const LITERALS = [
  "'it''s'",
  "'?'",
  "')'",
  "'WHERE x = ?'",
  "';'",
  "'-- ?'",
  "'/* ? */'",
  "'('",
  "''",
  "'ON CONFLICT'",
  "'VALUES (?), (?)'",
  "'x'",
];
// What only one engine reads this way: PostgreSQL ends a -- comment at a bare \r and continues an
// E'…' string on the next line with its escapes; MariaDB has # comments, and -- before DEL.
const FLAVOUR_GAPS = {
  sqlite: [],
  postgres: [" --?) WHERE; 'x\r", " -- c\r\n  "],
  mysql: [" # ?) \r WHERE; 'x\n", " --\x7f ?) WHERE; 'x\n", " -- \r ?) 'x\n"],
} as const;
const FLAVOUR_LITERALS = {
  sqlite: [],
  postgres: ["E'it\\'s'\n'\\'?)'", "e'\\\\'"],
  mysql: ["'it\\'s ?)'", '"dq \' ?)"'],
} as const;
const STRINGS = ["", "x", "it's", "?", ")", "WHERE", ";", "--", "/*", "'?'", "ünï", "a\nb"];

/** Builds random INSERT/UPDATE statements of accepted and rejected kinds for the SQLite flavour. */
export class StatementGenerator {
  private values: BindValue[] = [];
  private style: QuoteStyle = "plain";
  private readonly gaps: readonly string[];
  private readonly literals: readonly string[];
  /**
   * `flavour` keeps statements readable by that engine: no `main.` schema prefix or `x'…'` blob
   * literal outside SQLite, and only the identifier quotes that engine knows.
   */
  constructor(
    private readonly r: () => number,
    private readonly flavour: "sqlite" | "postgres" | "mysql" = "sqlite",
  ) {
    this.gaps = [...GAPS, ...FLAVOUR_GAPS[flavour]];
    this.literals = [...LITERALS, ...FLAVOUR_LITERALS[flavour]];
  }

  private int(n: number): number {
    return Math.floor(this.r() * n);
  }
  private pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }
  private chance(p: number): boolean {
    return this.r() < p;
  }
  private ws(): string {
    return this.pick(this.gaps);
  }
  private ows(): string {
    return this.chance(0.6) ? "" : this.ws();
  }
  private kw(word: string): string {
    const v = this.int(3);
    if (v === 0) return word.toUpperCase();
    if (v === 1) return word.toLowerCase();
    return [...word].map((c) => (this.chance(0.5) ? c.toUpperCase() : c.toLowerCase())).join("");
  }
  private ident(name: string): string {
    switch (this.style) {
      case "double":
        return this.chance(0.5) ? `"${name}"` : name;
      case "bracket":
        return this.chance(0.5) ? `[${name}]` : name;
      case "backtick":
        return this.chance(0.5) ? `\`${name}\`` : name;
      default:
        return this.chance(0.3) ? name.toUpperCase() : name;
    }
  }
  private table(name: string): string {
    return this.flavour === "sqlite" && this.chance(0.2) ? `main.${this.ident(name)}` : this.ident(name);
  }
  private value(): BindValue {
    switch (this.int(8)) {
      case 0:
        return this.int(2001) - 1000;
      case 1:
        return this.chance(0.05) ? -2e9 : (this.r() - 0.5) * 1e6; // -2e9 trips the CHECK
      case 2:
      case 3:
        return this.pick(STRINGS);
      case 4:
        return this.chance(0.5) ? null : "n";
      case 5:
        return new Uint8Array([this.int(256), this.int(256)]);
      case 6:
        return BigInt(this.int(1e6));
      default:
        return this.chance(0.5);
    }
  }
  /** A placeholder bound to `v` (a random value by default). */
  private p(v: BindValue = this.value()): string {
    this.values.push(v);
    return MARK;
  }
  private expr(): string {
    switch (this.int(12)) {
      case 0:
      case 1:
      case 2:
        return this.p();
      case 3:
        return String(this.int(100));
      case 4:
        return this.pick(this.literals);
      case 5:
        return `coalesce(${this.ows()}${this.p()},${this.ows()}${this.pick(this.literals)})`;
      case 6:
        return `(${this.kw("select")} ${this.p()})`;
      case 7:
        return `${this.kw("case")} ${this.kw("when")} ${this.p()} ${this.kw("is null")} ${this.kw("then")} ${this.pick(this.literals)} ${this.kw("else")} 'y' ${this.kw("end")}`;
      case 8:
        return `(${this.kw("select")} count(*) ${this.kw("from")} t ${this.kw("where")} b = ${this.p()} ${this.kw("or")} b = ${this.pick(this.literals)})`;
      case 9:
        return this.kw("null");
      case 10:
        return this.flavour === "sqlite" ? "x'0a0b'" : "'0a0b'";
      default:
        return `${this.p()} || ${this.pick(this.literals)}`;
    }
  }
  /** Fisher–Yates with the seeded PRNG (Array#sort with a random comparator is not reproducible). */
  private shuffle<T>(xs: T[]): T[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [xs[i], xs[j]] = [xs[j]!, xs[i]!];
    }
    return xs;
  }
  private subset(): string[] {
    const cols = COLUMNS.filter(() => this.chance(0.5));
    if (cols.length === 0) cols.push(this.pick(COLUMNS));
    return this.shuffle(cols);
  }
  private tail(): string {
    return this.pick(["", "", ";", " ; ", " -- trailing ?\n", "; /* x? */", "\n"]);
  }

  /** A random statement; about a quarter are of a rejected kind. */
  next(): GeneratedStatement {
    this.values = [];
    const styles = {
      sqlite: ["plain", "plain", "double", "bracket", "backtick"],
      postgres: ["plain", "double"],
      mysql: ["plain", "backtick"],
    } as const;
    this.style = this.pick(styles[this.flavour]);
    const g = this.chance(0.5) ? this.insert() : this.update();
    return { ...g, ...this.number(g.sql, g.extraArg) };
  }

  /** Replaces placeholder marks by `?` or `?NNN` (SQLite numbering) and orders the arguments to match. */
  private number(sql: string, extraArg: boolean): { sql: string; args: BindValue[] } {
    const values = this.values;
    const k = values.length;
    let args: BindValue[];
    let text: string;
    if (k > 0 && this.chance(0.2)) {
      // Numbered: a shuffled argument order, sometimes a number used twice, sometimes a plain `?`
      // where SQLite's rule (largest so far + 1) gives the same number.
      const perm = this.shuffle([...Array(k).keys()]);
      const slots: BindValue[] = new Array<BindValue>(k).fill(null);
      const used: number[] = [];
      let max = 0;
      text = sql.replaceAll(MARK, () => {
        const i = used.length;
        const n = i > 0 && this.chance(0.1) ? used[this.int(i)]! : perm[i]! + 1;
        if (!used.includes(n)) slots[n - 1] = values[i]!;
        used.push(n);
        const plain = n === max + 1 && this.chance(0.5);
        if (n > max) max = n;
        return plain ? "?" : `?${n}`;
      });
      args = slots.slice(0, max);
    } else {
      args = values.slice();
      text = sql.replaceAll(MARK, "?");
    }
    if (extraArg) args.push(1);
    return { sql: text, args };
  }

  private insert(): GeneratedStatement & { extraArg: boolean } {
    let cols = this.subset();
    const withId = this.chance(0.2);
    const exprs = cols.map(() => this.expr());
    if (withId) {
      cols = ["id", ...cols];
      exprs.unshift(this.p(1 + this.int(8)));
    }
    const colList = (cs: string[], raw: string[] = []) =>
      `(${this.ows()}${[...cs.map((c) => this.ident(c)), ...raw].join(`${this.ows()},${this.ows()}`)}${this.ows()})`;
    const valList = (es: string[]) => `(${this.ows()}${es.join(`${this.ows()},${this.ows()}`)}${this.ows()})`;
    let head = `${this.kw("insert")}${this.ws()}${this.kw("into")}${this.ws()}${this.table("t")}${this.ows()}`;
    let cl = colList(cols);
    let body = `${this.ows()}${this.kw("values")}${this.ows()}${valList(exprs)}`;
    let tail = this.tail();
    let rejectReason: string | undefined;
    let extraArg = false;
    if (this.chance(0.25)) {
      switch (this.int(10)) {
        case 0:
          body += `,${this.ows()}${valList(cols.map(() => this.expr()))}`;
          rejectReason = "multi-row VALUES";
          break;
        case 1:
          body = ` ${this.kw("select")} ${exprs.join(", ")}`;
          rejectReason = "INSERT … SELECT";
          break;
        case 2:
          cl = "";
          head += " ";
          rejectReason = "without an explicit column list";
          break;
        case 3:
          head = head.replace(
            /^insert/i,
            `${this.kw("insert")} ${this.kw("or")} ${this.pick(["IGNORE", "replace", "Abort"])}`,
          );
          rejectReason = "is already a conflict policy";
          break;
        case 4:
          tail = ` ${this.kw("on conflict do nothing")}${tail}`;
          rejectReason = "ON CONFLICT";
          break;
        case 5:
          tail = `; ${this.kw("select")} 1`;
          rejectReason = "more than one statement";
          break;
        case 6:
          cl = colList([...cols, "zz"]);
          rejectReason = "columns but VALUES has";
          break;
        case 7:
          cl = colList(cols, [this.pick(["outbox_seq", "OUTBOX_SEQ", '"outbox_seq"', "[Outbox_Seq]"])]);
          body = `${this.ows()}${this.kw("values")}${this.ows()}${valList([...exprs, this.p()])}`;
          rejectReason = "already sets outbox_seq";
          break;
        case 8:
          extraArg = true;
          rejectReason = "bind arguments";
          break;
        default:
          tail = ` ${this.kw("returning")} *${tail}`;
          rejectReason = "RETURNING";
      }
    }
    return {
      sql: head + cl + body + tail,
      args: [],
      kind: "insert",
      table: "t",
      quote: this.style,
      rejectReason,
      extraArg,
    };
  }

  private update(): GeneratedStatement & { extraArg: boolean } {
    const table = this.chance(0.2) ? "u" : "t";
    const cols = this.subset();
    const sets: string[] = [];
    if (cols.length >= 2 && this.chance(0.15)) {
      const [x, y] = cols.splice(0, 2) as [string, string];
      sets.push(`(${this.ident(x)}, ${this.ident(y)})${this.ows()}=${this.ows()}(${this.expr()}, ${this.p()})`);
    }
    for (const c of cols) sets.push(`${this.ident(c)}${this.ows()}=${this.ows()}${this.expr()}`);
    // Half of the SETs without a placeholder get one; the others stay constant (`SET b = 'x'`).
    if (!this.values.length && this.chance(0.5)) sets[0] = `${this.ident(cols[0] ?? "a")} = ${this.p()}`;
    let set = sets.join(`${this.ows()},${this.ows()}`);
    let where = "";
    if (table === "t") {
      const id = () => this.p(1 + this.int(6));
      const idCond = this.pick([
        () => `id = ${id()}`,
        () => `id ${this.kw("in")} (${this.kw("select")} ${id()})`,
        () => `id = (${this.kw("select")} ${id()} + 0)`,
        () => `id = ${id()} ${this.kw("or")} id = 99`,
        () => `${id()} = id`,
      ])();
      const extra = this.pick([
        () => "",
        () => `(b ${this.kw("is null")} ${this.kw("or")} b <> ${this.pick(this.literals)})`,
        () => `(coalesce(a, 0) > -100000 ${this.kw("or")} ${this.p()} ${this.kw("is null")})`,
        () => "1 = 1",
      ])();
      const cond =
        extra === ""
          ? idCond
          : this.chance(0.5)
            ? `${idCond} ${this.kw("and")} ${extra}`
            : `${extra} ${this.kw("and")} (${idCond})`;
      where = `${this.ws()}${this.kw("where")}${this.ws()}${cond}`;
    }
    const updateTable = `${this.kw("update")}${this.ws()}${this.table(table)}${this.ws()}`;
    let head = `${updateTable}${this.kw("set")}${this.ws()}`;
    let tail = this.tail();
    let rejectReason: string | undefined;
    let extraArg = false;
    if (this.chance(0.25)) {
      switch (this.int(7)) {
        case 0:
          set += ` ${this.kw("from")} u`;
          rejectReason = "UPDATE … FROM is not supported";
          break;
        case 1:
          tail = ` ${this.kw("limit")} 1${tail}`;
          rejectReason = "LIMIT is not supported";
          break;
        case 2:
          tail = ` ${this.kw("returning")} *${tail}`;
          rejectReason = "RETURNING is not supported";
          break;
        case 3:
          tail = `; ${this.kw("delete")} ${this.kw("from")} t`;
          rejectReason = "more than one statement";
          break;
        case 4:
          set += `, ${this.ident("outbox_seq")} = ${this.p()}`;
          rejectReason = "already sets outbox_seq";
          break;
        case 5:
          extraArg = true;
          rejectReason = "bind arguments";
          break;
        default:
          head = `${updateTable}${this.kw("as")} x ${this.kw("set")} `;
          rejectReason = "expected SET after the table name";
      }
    }
    return {
      sql: head + set + where + tail,
      args: [],
      kind: "update",
      table,
      quote: this.style,
      rejectReason,
      extraArg,
    };
  }
}
