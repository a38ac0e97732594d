import { randomBytes, timingSafeEqual } from "node:crypto";

export interface SignIn {
  readonly cookieName: string;
  /** A new one-time secret for a sign-in link, good for `linkTtlMs` unused. */
  newLink(): string;
  /** Spends an unused secret for a new session id, or says why not (unknown or used, or expired unused). */
  trade(secret: string): { session: string } | { refused: string };
  /** The operator a request's session cookie names, or undefined without a live session. */
  operatorOf(cookieHeader: string | undefined): string | undefined;
  /** Ends the session a request's cookie names (sign-out); false when it names none. */
  signOut(cookieHeader: string | undefined): boolean;
}

export interface SignInOptions {
  /** How long a link is good for unused (default 10 minutes): one left in a scroll-back stops working on its own. */
  readonly linkTtlMs?: number;
  /** How long a session lasts without a request (default 60 minutes): a browser left open on a shared desk ends. */
  readonly sessionIdleMs?: number;
  readonly now?: () => number;
}

export const LINK_TTL_MS = 10 * 60_000;
export const SESSION_IDLE_MS = 60 * 60_000;

/**
 * One-time sign-in links: each secret is good for one browser, once, and is spent there; what the browser keeps is a
 * session id in an HttpOnly cookie, which a page or a link cannot read. So the link in a terminal's scroll-back, a
 * shell history or a screen share is worthless once used, and nothing about the console (its page, its API token) is
 * served to whoever merely reaches the port: another user on a shared jump box gets 401.
 */
export function createSignIn(operator: string, options: SignInOptions = {}): SignIn {
  const ttl = options.linkTtlMs ?? LINK_TTL_MS;
  const idle = options.sessionIdleMs ?? SESSION_IDLE_MS;
  for (const [name, ms] of [
    ["linkTtlMs", ttl],
    ["sessionIdleMs", idle],
  ] as const)
    if (!(ms > 0)) throw new Error(`sign-in: ${name} must be more than 0 (got ${ms})`);
  const now = options.now ?? Date.now;
  /** Each unused secret and when it stops being good. */
  const unused = new Map<string, number>();
  /** Each session's operator and when it ends unless a request comes first. */
  const sessions = new Map<string, { operator: string; until: number }>();
  const cookieName = "sbinbox-session";
  const sessionOf = (cookieHeader: string | undefined): string | undefined => {
    const given = cookie(cookieHeader, cookieName);
    if (given === undefined) return undefined;
    for (const [session, { until }] of sessions) {
      if (until <= now()) sessions.delete(session);
      else if (same(session, given)) return session;
    }
    return undefined;
  };
  return {
    cookieName,
    newLink() {
      for (const [secret, until] of unused) if (until <= now()) unused.delete(secret);
      const secret = randomBytes(24).toString("base64url");
      unused.set(secret, now() + ttl);
      return secret;
    },
    trade(secret) {
      for (const [candidate, until] of unused) {
        if (!same(candidate, secret)) continue;
        unused.delete(candidate);
        if (until <= now())
          return {
            refused: `this sign-in link expired unused after ${Math.round(ttl / 60_000)} min: press Enter in the console's terminal for a new one`,
          };
        const session = randomBytes(24).toString("base64url");
        sessions.set(session, { operator, until: now() + idle });
        return { session };
      }
      return { refused: "this sign-in link is unknown or used already: ask the console for a new one" };
    },
    operatorOf(cookieHeader) {
      const session = sessionOf(cookieHeader);
      if (session === undefined) return undefined;
      const live = sessions.get(session)!;
      live.until = now() + idle;
      return live.operator;
    },
    signOut(cookieHeader) {
      const session = sessionOf(cookieHeader);
      return session !== undefined && sessions.delete(session);
    },
  };
}

function cookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) return value.join("=");
  }
  return undefined;
}

/** Compares secrets in time that does not depend on where they differ. */
export function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
