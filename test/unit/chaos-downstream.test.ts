// The chaos run's fake external API must be no more forgiving than a real idempotency-key API, and its record must
// show a doubled mail; the chaos verdict is only as strong as these.
import assert from "node:assert/strict";
import { FakeDownstream, type Behaviour } from "../../scripts/chaos-downstream.ts";
import { DownstreamHttpError, httpMailer } from "../../scripts/chaos-handlers.ts";
import { retryClass } from "../../src/worker/retry-policy.ts";

const post = (api: FakeDownstream, key: string, to = "a@example.com") =>
  fetch(`${api.url}/mail`, {
    method: "POST",
    headers: { "idempotency-key": key, "content-type": "application/json" },
    body: JSON.stringify({ to }),
  });

describe("chaos fake downstream", () => {
  let api: FakeDownstream | undefined;
  afterEach(async () => {
    await api?.close();
    api = undefined;
  });

  it("answers 409 idempotency_key_in_use to a same-key call while the first is still running", async () => {
    const plan = (): Behaviour => ({ kind: "slow", ms: 1_000 });
    api = await FakeDownstream.start(plan);
    const first = post(api, "k1");
    // The first call has made its effect once the record shows it; the second is sent while it is unanswered.
    while ((api.keys.get("k1")?.effects.length ?? 0) === 0) await new Promise((r) => setImmediate(r));
    const second = await post(api, "k1");
    assert.equal(second.status, 409);
    assert.deepEqual(
      ((await second.json()) as { error: { code: string } }).error.code,
      "idempotency_key_in_use",
    );
    assert.equal((await first).status, 200);
    const third = await post(api, "k1");
    assert.deepEqual(await third.json(), { id: 1, repeated: true });
    assert.equal(api.effects, 1);
  });

  it("the chaos mailer's error for that 409 is retried as transient", async () => {
    api = await FakeDownstream.start(() => ({ kind: "slow", ms: 1_000 }));
    const mailer = httpMailer(api.url, 5_000);
    const first = mailer.send({ to: "a@example.com", subject: "hi", idempotencyKey: "k2" });
    while ((api.keys.get("k2")?.effects.length ?? 0) === 0) await new Promise((r) => setImmediate(r));
    const error = await mailer.send({ to: "a@example.com", subject: "hi", idempotencyKey: "k2" }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await first;
    assert.ok(error instanceof DownstreamHttpError);
    assert.equal(error.status, 409);
    assert.equal(retryClass(error, "permanent"), "transient");
  });

  it("keeps every effect under a key, so a mail sent twice under one key is counted as doubled", async () => {
    api = await FakeDownstream.start(() => ({ kind: "normal" }), { dedupe: false });
    assert.equal((await post(api, "k3")).status, 200);
    assert.equal((await post(api, "k3")).status, 200);
    assert.equal(api.effects, 2);
    assert.equal(api.doubledKeys, 1);
  });

  it("counts the calls it refuses while down, and serves again on the same port once up", async () => {
    api = await FakeDownstream.start(() => ({ kind: "normal" }));
    const port = api.port;
    await api.goDown();
    await assert.rejects(post(api, "k4"));
    assert.equal(api.refusedWhileDown, 1);
    assert.equal(api.calls, 0);
    await api.comeUp();
    assert.equal(api.port, port);
    assert.equal((await post(api, "k4")).status, 200);
  });
});
