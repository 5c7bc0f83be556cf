export { injectOutboxSeq, toDialect, type InjectOptions, type RewrittenStatement } from "./rewrite.ts";
export { rewriteTemplate, bindTemplate, SEQ_ARG, type RewriteTemplate, type TemplateOptions } from "./template.ts";
export { validateStatement, checkStatement, checkInjectable, statementCount } from "./statement.ts";
export { StatementCache } from "./statement-cache.ts";
export { DIALECTS } from "../vocabulary.ts";
export { schemaSql, dropSchemaSql, maxSeqSql, seqIndexName } from "./schema.ts";
export { quoteIdent } from "./ident.ts";
export { tokenize, type Token, type TokenKind } from "./lexer.ts";
