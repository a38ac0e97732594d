// What Service Bus refuses of a namespace's forwarding when its entities are created; the parsed config's check,
// apart from the forwarding itself (forwarding.ts), which needs the entities.
import { BrokerConfigError, type BrokerConfig, type QueueSettings } from "./entity-settings.ts";

/** "Don't create a chain that exceeds four hops. Messages that exceed four hops are dead-lettered." */
export const MAX_TRANSFER_HOPS = 4;

/** One forwarding source: a queue or a subscription, by its entity path, and where it forwards. */
interface Edge {
  readonly source: string;
  readonly setting: "ForwardTo" | "ForwardDeadLetteredMessagesTo";
  readonly from: string;
  readonly to: string;
}

function edges(config: BrokerConfig): Edge[] {
  const out: Edge[] = [];
  const add = (source: string, from: string, settings: QueueSettings): void => {
    if (settings.forwardTo !== undefined)
      out.push({ source, setting: "ForwardTo", from, to: settings.forwardTo });
    if (settings.forwardDeadLetteredMessagesTo !== undefined)
      out.push({
        source,
        setting: "ForwardDeadLetteredMessagesTo",
        from,
        to: settings.forwardDeadLetteredMessagesTo,
      });
  };
  for (const q of config.queues) add(`queue "${q.name}"`, q.name, q);
  for (const t of config.topics)
    for (const s of t.subscriptions) add(`subscription "${s.queue.name}"`, t.name, s.queue);
  return out;
}

/**
 * Refuses what Service Bus refuses when the entity is created: a destination that does not exist (its error reads
 * "The auto forwarding destination entity does not exist"), and an entity that forwards to itself ("The entity ...
 * has an auto-forwarding policy to itself"). A longer loop (a -> b -> a) is refused here too, although on Azure it
 * would only dead-letter every message after four hops: nothing useful is ever built of one.
 */
export function checkForwarding(config: BrokerConfig): void {
  const names = new Map<string, string>();
  for (const q of config.queues) names.set(q.name.toLowerCase(), q.name);
  for (const t of config.topics) names.set(t.name.toLowerCase(), t.name);
  const all = edges(config);
  for (const edge of all) {
    if (!names.has(edge.to.toLowerCase()))
      throw new BrokerConfigError(
        `${edge.source} ${edge.setting}`,
        `names "${edge.to}": the auto forwarding destination entity does not exist (queues and topics: ${[...names.values()].join(", ")})`,
      );
    if (edge.to.toLowerCase() === edge.from.toLowerCase())
      throw new BrokerConfigError(
        `${edge.source} ${edge.setting}`,
        `names "${edge.to}": the entity has an auto-forwarding policy to itself`,
      );
  }
  const next = new Map<string, string[]>();
  // Only ForwardTo chains loop: a dead-lettered message forwarded on is one step, not a cycle.
  for (const edge of all.filter((e) => e.setting === "ForwardTo")) {
    const from = edge.from.toLowerCase();
    next.set(from, [...(next.get(from) ?? []), edge.to.toLowerCase()]);
  }
  const done = new Set<string>();
  const visit = (node: string, path: string[]): void => {
    if (path.includes(node)) {
      const loop = [...path.slice(path.indexOf(node)), node].map((n) => names.get(n) ?? n);
      const last = path[path.length - 1];
      const edge = all.find((e) => e.from.toLowerCase() === last && e.to.toLowerCase() === node);
      throw new BrokerConfigError(
        `${edge?.source ?? `"${loop[0]}"`} ForwardTo`,
        `makes a forwarding loop (${loop.join(" -> ")}); every message in it would be dead-lettered after ${MAX_TRANSFER_HOPS} hops`,
      );
    }
    if (done.has(node)) return;
    for (const to of next.get(node) ?? []) visit(to, [...path, node]);
    done.add(node);
  };
  for (const node of next.keys()) visit(node, []);
}
