/**
 * Azure SQL refusing any connection over its public endpoint because public network access is off: 47073, and 42101
 * from some gateways. Waiting never helps; only a machine inside the virtual network (through the private endpoint)
 * gets in. tedious drops the number here too, so the message is read: both say "Deny Public Network Access is set
 * to Yes".
 */
export const PUBLIC_ACCESS_DENIED = [47073, 42101];

export function isPublicAccessRefusal(error: object): boolean {
  const { code, message, number } = error as { code?: unknown; message?: unknown; number?: unknown };
  if (typeof number === "number" && PUBLIC_ACCESS_DENIED.includes(number)) return true;
  return (
    code === "ELOGIN" &&
    typeof message === "string" &&
    /Deny Public Network Access is set to Yes/i.test(message)
  );
}
