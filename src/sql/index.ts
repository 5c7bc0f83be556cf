export { injectOutboxSeq, toDialect, type InjectOptions, type RewrittenStatement } from "./rewrite.ts";
export { schemaSql, dropSchemaSql, maxSeqSql, seqIndexName } from "./schema.ts";
export { quoteIdent } from "./ident.ts";
export { tokenize, type Token, type TokenKind } from "./lexer.ts";
