import type { MessageHandler } from "../domain/handler.ts";
import { accountCreditedHandler } from "./accounts.ts";
import { FakeMailer, welcomeEmailHandler, type Mailer } from "./welcome-email.ts";

export * from "./accounts.ts";
export * from "./welcome-email.ts";

/** The handlers `sbinbox worker` runs out of the box: the example domain. */
export function exampleHandlers(mailer: Mailer = new FakeMailer()): MessageHandler[] {
  return [accountCreditedHandler(), welcomeEmailHandler(mailer)];
}
