import type { MessageHandler } from "../domain/handler.ts";
import { accountCreditedHandler, accountCreditedStatementsHandler } from "./accounts.ts";
import { FakeMailer, welcomeEmailHandler, type Mailer } from "./welcome-email.ts";

export * from "./accounts.ts";
export * from "./welcome-email.ts";

/**
 * The handlers `sbinbox worker` runs out of the box: the example domain. `credits` chooses the kind of the
 * AccountCredited handler: code that runs its statements (the default) or the same statements as data.
 */
export function exampleHandlers(
  mailer: Mailer = new FakeMailer(),
  credits: "transactional" | "statements" = "transactional",
): MessageHandler[] {
  const credit = credits === "statements" ? accountCreditedStatementsHandler() : accountCreditedHandler();
  return [credit, welcomeEmailHandler(mailer)];
}
