// An OpenTelemetry SDK registered in the test process, as an application would: a tracer
// provider and a (synchronous) context manager, for the tests that push inside active spans.
import { afterAll, beforeAll } from "bun:test";
import { context, trace } from "@opentelemetry/api";
import { StackContextManager, TracerProvider } from "@opentelemetry/sdk-trace";

/** Registers the SDK globally for the enclosing describe (or file), and removes it afterwards. */
export function registerOtelForTests(): void {
  beforeAll(() => {
    context.setGlobalContextManager(new StackContextManager().enable());
    trace.setGlobalTracerProvider(new TracerProvider());
  });
  afterAll(() => {
    trace.disable();
    context.disable();
  });
}
