import { context, INVALID_SPAN_CONTEXT, ROOT_CONTEXT, trace, type Context } from "@opentelemetry/api";

/**
 * Whether the span of `ctx` (the active one by default) is there but not recording: its message was sampled out.
 * Then the worker starts no child span under it (settlement, `inbox.transaction`, statements, `BEGIN`/`COMMIT`).
 * Every standard sampler decides a child of a sampled-out span the same way (ParentBased follows the parent;
 * TraceIdRatio, and Azure Monitor's samplers, decide by the trace id, which the child shares), so those children
 * would record nothing anyway, and starting them costs an object, ids and a context switch each. A context with no
 * span (a chore, a program's own call) still starts its spans as roots, as before.
 */
export function sampledOut(ctx: Context = context.active()): boolean {
  const span = trace.getSpan(ctx);
  return span !== undefined && !span.isRecording();
}

/**
 * A context whose active span records nothing and carries no trace: work run in it starts no span (`sampledOut`).
 * For the group commit's transaction when none of its messages is recorded (docs/telemetry.md, "Sampling").
 */
export const UNTRACED: Context = trace.setSpan(ROOT_CONTEXT, trace.wrapSpanContext(INVALID_SPAN_CONTEXT));
