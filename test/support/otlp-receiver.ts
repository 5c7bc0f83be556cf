// A local OTLP/HTTP receiver for the tracing tests (no collector runs on these machines): it
// accepts POST /v1/traces in the JSON protocol, decodes the spans the SDK sent and keeps them,
// flattened with their resource's attributes. `failWith` makes it answer every export with that
// HTTP status (a collector that refuses).

/** An OTLP attribute value as the JSON protocol encodes it. */
type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values: AnyValue[] };
};
type KeyValue = { key: string; value: AnyValue };
/** A span as the JSON protocol sends it (the fields read here). */
interface WireSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string | number;
  endTimeUnixNano: string | number;
  attributes?: KeyValue[];
  events?: Array<{ name: string; timeUnixNano: string | number; attributes?: KeyValue[] }>;
  links?: Array<{ traceId: string; spanId: string; attributes?: KeyValue[] }>;
  status?: { code?: number; message?: string };
}

/** One received span, its attributes decoded to plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startMs: number;
  endMs: number;
  attributes: Record<string, unknown>;
  events: Array<{ name: string; timeMs: number; attributes: Record<string, unknown> }>;
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, unknown> }>;
  status: { code?: number; message?: string };
  resource: Record<string, unknown>;
}

export interface OtlpReceiver {
  /** The base URL, for OTEL_EXPORTER_OTLP_ENDPOINT or `[tracing] endpoint`. */
  readonly url: string;
  readonly spans: ReceivedSpan[];
  /** Requests received, and their content types. */
  readonly requests: Array<{ contentType: string; headers: Record<string, string> }>;
  failWith: number | null;
  stop(): Promise<void>;
}

function decode(value: AnyValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(decode);
  return null;
}

const attributesOf = (list: KeyValue[] | undefined) =>
  Object.fromEntries((list ?? []).map((kv) => [kv.key, decode(kv.value)]));
const ms = (nanos: string | number) => Number(BigInt(nanos) / 1_000_000n);

/** Starts a receiver on 127.0.0.1 (a free port). */
export function startOtlpReceiver(): OtlpReceiver {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpReceiver["requests"] = [];
  const receiver = {
    spans,
    requests,
    failWith: null as number | null,
  };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      if (req.method !== "POST" || new URL(req.url).pathname !== "/v1/traces")
        return new Response("not found", { status: 404 });
      const contentType = req.headers.get("content-type") ?? "";
      requests.push({ contentType, headers: Object.fromEntries(req.headers) });
      if (receiver.failWith !== null) return new Response("refused", { status: receiver.failWith });
      if (!contentType.includes("json")) return new Response("{}", { headers: { "content-type": "application/json" } });
      const body = (await req.json()) as {
        resourceSpans: Array<{ resource?: { attributes?: KeyValue[] }; scopeSpans: Array<{ spans: WireSpan[] }> }>;
      };
      for (const rs of body.resourceSpans ?? []) {
        const resource = attributesOf(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? "",
              name: s.name,
              kind: s.kind,
              startMs: ms(s.startTimeUnixNano),
              endMs: ms(s.endTimeUnixNano),
              attributes: attributesOf(s.attributes),
              events: (s.events ?? []).map((e) => ({
                name: e.name,
                timeMs: ms(e.timeUnixNano),
                attributes: attributesOf(e.attributes),
              })),
              links: (s.links ?? []).map((l) => ({
                traceId: l.traceId,
                spanId: l.spanId,
                attributes: attributesOf(l.attributes),
              })),
              status: s.status ?? {},
              resource,
            });
          }
        }
      }
      return new Response("{}", { headers: { "content-type": "application/json" } });
    },
  });
  return Object.assign(receiver, { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) });
}
