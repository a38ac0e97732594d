import { SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import type { Logger } from "../telemetry/logger.ts";
import { TRACER_NAME } from "../telemetry/names.ts";
import type { AuditEvent } from "../console/service.ts";
import type { AuditFile } from "./audit-file.ts";
import { osUser } from "./operator.ts";

export interface AuditOptions {
  /** Which command acts: the log line's `msg` prefix and the span's name (`console.plan`, `sbinbox.dlq purge`). */
  readonly component?: "console" | "dlq";
  /** The durable audit (`--audit-file`): each event a fsync'ed line before it is logged. */
  readonly file?: AuditFile;
  /** A result or end line the file could not take (the act is done by then): said, not thrown into the run. */
  readonly onFileError?: (error: Error) => void;
}

/** How many sequence numbers a plan's telemetry event carries; the log line carries them all. */
const EVENT_IDS = 200;

/**
 * Every plan, run and per-message result as a structured log line (JSON, the product's logger: App Service and a
 * terminal alike collect it), and each plan and run as a span, which the OpenTelemetry exporter sends to Application
 * Insights when APPLICATIONINSIGHTS_CONNECTION_STRING is set (bin/sbinbox.js starts it for every command): a plan is
 * one span; a run is one span from start to end, with its counts per result and the operator as attributes.
 */
export function createAudit(logger: Logger, options: AuditOptions = {}): (event: AuditEvent) => void {
  const tracer = trace.getTracer(TRACER_NAME);
  const runs = new Map<string, Span>();
  const component = options.component ?? "console";
  const user = osUser();
  return (event) => {
    writeDurably(options, component, event, user);
    logger.info(`${component}.${event.event}`, { audit: { ...event, osUser: user } });
    const common = {
      "sbinbox.console.operator": event.operator,
      "sbinbox.console.os_user": user,
      "sbinbox.console.action": event.action,
      "messaging.destination.name": event.entity,
    };
    if (event.event === "plan") {
      const span = tracer.startSpan(`sbinbox.${component} plan ${event.action}`, {
        attributes: {
          ...common,
          "sbinbox.console.count": event.count,
          "sbinbox.console.sequence_numbers": event.messages.slice(0, EVENT_IDS).map((m) => m.sequenceNumber),
          "sbinbox.console.message_ids": event.messages.slice(0, EVENT_IDS).map((m) => m.messageId),
        },
      });
      span.end();
    } else if (event.event === "run") {
      runs.set(
        event.job,
        tracer.startSpan(`sbinbox.${component} ${event.action}`, {
          attributes: { ...common, "sbinbox.console.job": event.job, "sbinbox.console.count": event.count },
        }),
      );
    } else if (event.event === "end") {
      const span = runs.get(event.job);
      runs.delete(event.job);
      if (!span) return;
      span.setAttribute("sbinbox.console.state", event.state);
      for (const [result, n] of Object.entries(event.counts))
        span.setAttribute(`sbinbox.console.result.${result.replace(/\W+/g, "_")}`, n);
      if (event.state === "failed") span.setStatus({ code: SpanStatusCode.ERROR, message: event.error });
      span.end();
    }
  };
}

/**
 * The event's line in the audit file, if there is one. A plan or a run's start that cannot be written throws, so
 * nothing is done unrecorded; a result or an end comes after its act, so a failed write is reported instead.
 */
function writeDurably(options: AuditOptions, component: string, event: AuditEvent, user: string): void {
  if (!options.file) return;
  try {
    options.file.write({ component, ...event, osUser: user });
  } catch (error) {
    if (event.event === "plan" || event.event === "run") throw error;
    options.onFileError?.(error as Error);
  }
}
