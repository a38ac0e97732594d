import { context, INVALID_SPAN_CONTEXT, ROOT_CONTEXT, trace, type Context } from "@opentelemetry/api";

/**
 * Whether the span of `ctx` (the active one by default) is there but not recording: its message was sampled out.
 * Then the worker starts no child span under it (settlement, `inbox.transaction`, statements, `BEGIN`/`COMMIT`).
 * Every standard sampler drops a child of a sampled-out span (ParentBased follows the parent; TraceIdRatio decides
 * by the trace id, which the child shares; Azure Monitor's samplers follow a local parent's flag, and at a computed
 * rate of 0 drop all), so those children would record nothing, and starting them costs an object, ids and a
 * context switch each. (At a computed rate of 100 Azure's ignore the parent and would record an orphan child.) A context with no
 * span (a chore, a program's own call) still starts its spans as roots, as before.
 */
export function sampledOut(ctx: Context = context.active()): boolean {
  const span = trace.getSpan(ctx);
  return span !== undefined && !span.isRecording();
}

/**
 * A context whose active span records nothing and carries no trace: work run in it starts no span (`sampledOut`).
 * For a group commit's transaction whose first message has no span at all; one with a non-recording process span
 * runs under that span instead, so a library's span inside stays in its trace (docs/telemetry.md, "Sampling").
 */
export const UNTRACED: Context = trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
