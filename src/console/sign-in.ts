import { randomBytes, timingSafeEqual } from "node:crypto";

export interface SignIn {
  readonly cookieName: string;
  /** A new one-time secret for a sign-in link. */
  newLink(): string;
  /** Spends an unused secret for a new session id; undefined when the secret is unknown or spent. */
  trade(secret: string): string | undefined;
  /** The operator a request's session cookie names, or undefined without a live session. */
  operatorOf(cookieHeader: string | undefined): string | undefined;
}

/**
 * One-time sign-in links: each secret is good for one browser, once, and is spent there; what the browser keeps is a
 * session id in an HttpOnly cookie, which a page or a link cannot read. So the link in a terminal's scroll-back, a
 * shell history or a screen share is worthless once used, and nothing about the console (its page, its API token) is
 * served to whoever merely reaches the port: another user on a shared jump box gets 401.
 */
export function createSignIn(operator: string): SignIn {
  const unused = new Set<string>();
  const sessions = new Map<string, string>();
  const cookieName = "sbinbox-session";
  return {
    cookieName,
    newLink() {
      const secret = randomBytes(24).toString("base64url");
      unused.add(secret);
      return secret;
    },
    trade(secret) {
      for (const candidate of unused) {
        if (!same(candidate, secret)) continue;
        unused.delete(candidate);
        const session = randomBytes(24).toString("base64url");
        sessions.set(session, operator);
        return session;
      }
      return undefined;
    },
    operatorOf(cookieHeader) {
      const given = cookie(cookieHeader, cookieName);
      if (given === undefined) return undefined;
      for (const [session, who] of sessions) if (same(session, given)) return who;
      return undefined;
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

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
