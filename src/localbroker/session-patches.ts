// rhea's sessions as the broker needs them to behave like Service Bus toward the SDKs (server.ts patches each one).

import { isDeepStrictEqual } from "node:util";

/** Marks a single (non-batch) transfer so rhea hands the broker its bytes instead of a decoded message. */
const RAW_SINGLE = 0xfffffff0;

/**
 * What the broker changes in each session rhea opens: single transfers handed over as their bytes, attaches
 * answered before transfers on the same link, flow echoes answered, a disposition range sent only over equal outcomes.
 */
export function patchSession(session: Record<string, unknown> | undefined): void {
  if (!session) return;
  attachRepliesFirst(session as unknown as RheaSession);
  answerEchoes(session as unknown as RheaSession);
  splitMixedDispositions(session as unknown as RheaSession);
  const original = session["on_transfer"] as (frame: { performative: { message_format?: number } }) => void;
  session["on_transfer"] = function (this: unknown, frame: { performative: { message_format?: number } }) {
    if (!frame.performative.message_format) frame.performative.message_format = RAW_SINGLE;
    original.call(this, frame);
  };
}

interface RheaSession {
  state: { need_open(): boolean };
  local: { begin: unknown };
  links: Record<string, { state: { need_open(): boolean }; local: { attach: unknown } }>;
  remote: { handles: Record<number, { issue_flow: boolean } | undefined> };
  connection: { _register(): void };
  output(frame: unknown, payload?: unknown): void;
  outgoing: { deliveries: DeliveriesById };
  incoming: { deliveries: DeliveriesById };
  _process(): void;
  _write_flow(link?: unknown): void;
  on_flow(frame: { performative: { echo?: boolean; handle?: number } }): void;
}

/**
 * rhea's session writes queued transfers and dispositions, then each link's pending attach, flow and detach. A
 * client that sends its credit (or a request on a reply link) right behind its attach, as the .NET SDK does with
 * prefetch, would get a transfer on a handle it has not seen attached, and end the session with
 * amqp:session:unattached-handle. Service Bus answers an attach before anything else on that link, so pending
 * attaches go out first here. Flow echoes, drain replies and detaches stay after the transfers, as rhea has them:
 * a drain reply must count transfers already on the wire, and nothing may follow a detach.
 */
function attachRepliesFirst(session: RheaSession): void {
  const original = session._process.bind(session);
  session._process = () => {
    if (session.state.need_open()) session.output(session.local.begin);
    for (const name in session.links) {
      const link = session.links[name]!;
      if (link.state.need_open()) session.output(link.local.attach);
    }
    original();
  };
}

/**
 * A flow with `echo` asks the peer for its own flow state (AMQP 1.0, 2.7.4); rhea ignores the field. The answer
 * for a link goes through the link's own flow, written after its attach and any transfers already queued.
 */
function answerEchoes(session: RheaSession): void {
  const original = session.on_flow.bind(session);
  session.on_flow = (frame) => {
    original(frame);
    if (frame.performative.echo !== true) return;
    const handle = frame.performative.handle;
    const link = handle === undefined || handle === null ? undefined : session.remote.handles[handle];
    if (link) {
      link.issue_flow = true;
      session.connection._register();
    } else session._write_flow();
  };
}

interface DeliveriesById {
  by_id(id: number): { state?: unknown } | undefined;
}

interface DispositionFrame {
  constructor: { descriptor?: { symbolic?: string } };
  role: boolean;
  first: number;
  last?: number;
  settled?: boolean;
  state?: unknown;
}

/**
 * rhea 3.0.5 folds the dispositions of consecutive deliveries updated in one tick into one range sent with the first
 * delivery's state, and a range of one absorbs the next delivery whatever its outcome (session.js
 * `write_dispositions`: the comparison is guarded by `first !== last`; settlement.ts has the client's side). The
 * broker answers neighbouring settlements with different outcomes (accepted beside ServerBusy or lock lost), so a
 * client would be told "completed" for a settlement the broker refused. A range frame is split here into runs of
 * deep-equal states (condition, description and info included), each run its own frame, before it is written.
 */
function splitMixedDispositions(session: RheaSession): void {
  const original = session.output.bind(session);
  session.output = (frame: unknown, payload?: unknown) => {
    const runs = isRange(frame) ? equalStateRuns(session, frame) : undefined;
    if (!runs || runs.length < 2) return original(frame, payload);
    const disposition = frame as DispositionFrame;
    // rhea's composite types build a frame of the same type from its fields with create()
    const build = disposition.constructor as unknown as { create(fields: Record<string, unknown>): unknown };
    for (const run of runs)
      original(
        build.create({
          role: disposition.role,
          first: run.first,
          last: run.last,
          settled: disposition.settled,
          state: run.state,
        }),
      );
  };
}

function isRange(frame: unknown): frame is DispositionFrame {
  const f = frame as Partial<DispositionFrame> | undefined;
  return (
    f?.constructor?.descriptor?.symbolic === "amqp:disposition:list" &&
    typeof f.first === "number" &&
    typeof f.last === "number" &&
    f.last > f.first
  );
}

/** The range's deliveries grouped into consecutive runs of equal state; undefined when one is not found. */
function equalStateRuns(
  session: RheaSession,
  frame: DispositionFrame,
): { first: number; last: number; state: unknown }[] | undefined {
  // role true: the broker is the receiver, the deliveries are ones it received (incoming)
  const deliveries = frame.role ? session.incoming.deliveries : session.outgoing.deliveries;
  const runs: { first: number; last: number; state: unknown }[] = [];
  for (let id = frame.first; id <= frame.last!; id++) {
    const delivery = deliveries.by_id(id);
    if (!delivery) return undefined;
    const run = runs[runs.length - 1];
    if (run && isDeepStrictEqual(run.state, delivery.state)) run.last = id;
    else runs.push({ first: id, last: id, state: delivery.state });
  }
  return runs;
}
