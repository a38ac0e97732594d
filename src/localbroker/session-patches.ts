// rhea's sessions as the broker needs them to behave like Service Bus toward the SDKs (server.ts patches each one).

/** Marks a single (non-batch) transfer so rhea hands the broker its bytes instead of a decoded message. */
const RAW_SINGLE = 0xfffffff0;

/**
 * What the broker changes in each session rhea opens: single transfers handed over as their bytes, attaches
 * answered before transfers on the same link, flow echoes answered.
 */
export function patchSession(session: Record<string, unknown> | undefined): void {
  if (!session) return;
  attachRepliesFirst(session as unknown as RheaSession);
  answerEchoes(session as unknown as RheaSession);
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
  output(frame: unknown): void;
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
