import { userInfo } from "node:os";

/**
 * Who is acting, for the audit of `sbinbox dlq` and `sbinbox console`: the name given (`--operator`), else the OS
 * user running the command. The one place the operator is read, so a signed-in identity (Entra ID, where the
 * console runs in Azure) can take the OS user's place here alone.
 */
export function operatorIdentity(given?: string): string {
  if (given !== undefined) {
    const name = given.trim();
    if (name === "" || [...name].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f))
      throw new Error(`--operator ${JSON.stringify(given)} must be a name: not empty, no control characters`);
    return name;
  }
  return userInfo().username;
}

/** The OS user running the command, recorded beside the operator: --operator is only what the caller says. */
export function osUser(): string {
  return userInfo().username;
}
