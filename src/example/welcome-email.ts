import { z } from "zod";
import type { TwoPhaseHandler } from "../domain/handler.ts";

/** The two-phase example: an effect outside the database, made safe by the external system's idempotency key. */
export const WELCOME_EMAIL_REQUESTED = "WelcomeEmailRequested";

export const welcomeEmailSchema = z.object({
  userId: z.string().min(1),
  email: z.email(),
});
export type WelcomeEmailRequested = z.infer<typeof welcomeEmailSchema>;

export interface Mailer {
  send(mail: { to: string; subject: string; idempotencyKey: string }): Promise<void>;
}

/**
 * A stand-in for an e-mail API that honours idempotency keys, as real ones (and payment APIs) do: a repeated key
 * is accepted and not sent again. `sent` counts real sends, `calls` every request.
 */
export class FakeMailer implements Mailer {
  readonly sentByKey = new Map<string, string>();
  calls = 0;
  get sent(): number {
    return this.sentByKey.size;
  }
  send(mail: { to: string; subject: string; idempotencyKey: string }): Promise<void> {
    this.calls += 1;
    if (!this.sentByKey.has(mail.idempotencyKey)) this.sentByKey.set(mail.idempotencyKey, mail.to);
    return Promise.resolve();
  }
}

export function welcomeEmailHandler(mailer: Mailer): TwoPhaseHandler<WelcomeEmailRequested> {
  return {
    kind: "two-phase",
    type: WELCOME_EMAIL_REQUESTED,
    schema: welcomeEmailSchema,
    perform(body, context) {
      return mailer.send({ to: body.email, subject: "Welcome", idempotencyKey: context.idempotencyKey });
    },
  };
}
