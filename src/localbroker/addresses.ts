/**
 * Entity addresses as clients write them: "q", "q/$DeadLetterQueue", "q/$management", a subscription's
 * "t/Subscriptions/s" with the same suffixes, or full sb:// URIs.
 */
export interface EntityAddress {
  /** The queue's or the topic's name. */
  queue: string;
  /** The subscription's name, when the address names one of a topic's subscriptions. */
  subscription?: string;
  deadLetter: boolean;
  management: boolean;
}

export const DEAD_LETTER_SUFFIX = "$deadletterqueue";

export function parseEntityAddress(address: string | undefined): EntityAddress | undefined {
  if (!address) return undefined;
  let path = address;
  const scheme = path.indexOf("://");
  if (scheme >= 0) {
    const slash = path.indexOf("/", scheme + 3);
    path = slash >= 0 ? path.slice(slash + 1) : "";
  }
  const segments = path.split("/").filter((s) => s !== "");
  let management = false;
  if (segments.length > 0 && segments[segments.length - 1]!.toLowerCase() === "$management") {
    management = true;
    segments.pop();
  }
  let deadLetter = false;
  if (segments.length >= 2 && segments[segments.length - 1]!.toLowerCase() === DEAD_LETTER_SUFFIX) {
    deadLetter = true;
    segments.pop();
  }
  if (segments.length === 3 && segments[1]!.toLowerCase() === "subscriptions")
    return { queue: segments[0]!, subscription: segments[2]!, deadLetter, management };
  if (segments.length !== 1) return undefined;
  return { queue: segments[0]!, deadLetter, management };
}

export function entityNotFound(address: string): { condition: string; description: string } {
  return {
    condition: "amqp:not-found",
    description: `The messaging entity '${address}' could not be found. To know more visit https://aka.ms/sbResourceMgrExceptions.`,
  };
}
