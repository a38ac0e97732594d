import assert from "node:assert/strict";
import { parseConfig } from "../../src/localbroker/config.ts";
import { parseSqlFilter, SqlFilterError, type Value } from "../../src/localbroker/sql-filter.ts";

function matches(
  expression: string,
  user: Record<string, Value>,
  system: Record<string, string> = {},
): boolean {
  return parseSqlFilter(expression).matches({
    system: (name) => system[name],
    user: (name) => (name in user ? user[name] : undefined),
  });
}

describe("SQL filter (Service Bus subset)", () => {
  it("compares, combines and negates with SQL's three-valued logic", () => {
    assert.equal(matches("amount > 10 AND region = 'eu'", { amount: 11, region: "eu" }), true);
    assert.equal(matches("amount > 10 AND region = 'eu'", { amount: 10, region: "eu" }), false);
    assert.equal(matches("amount > 10 OR region = 'eu'", { region: "eu" }), true, "unknown OR true");
    assert.equal(matches("amount > 10", {}), false, "an absent property is unknown, not a match");
    assert.equal(matches("NOT (amount > 10)", {}), false, "NOT unknown stays unknown");
    assert.equal(
      matches("amount <> 3", { amount: "3" }),
      false,
      "different types are neither equal nor unequal",
    );
    assert.equal(matches("amount != 3", { amount: 4 }), true);
    assert.equal(matches("a * 2 + 1 = 7 AND b % 4 = 1 AND -c = 2", { a: 3, b: 9, c: -2 }), true);
  });

  it("divides integers as C# does (truncating), and decimals as decimals", () => {
    assert.equal(matches("qty / 4 = 2", { qty: 10 }), true, "10 / 4 is 2 between integers");
    assert.equal(matches("qty / 4 = 2.5", { qty: 10 }), false);
    assert.equal(matches("-qty / 4 = -2", { qty: 10 }), true, "truncated toward zero");
    assert.equal(
      matches("qty / 4.0 = 2.5", { qty: 10 }),
      true,
      "a decimal literal makes it a double division",
    );
    assert.equal(
      matches("price / 2 = 1.25", { price: 2.5 }),
      true,
      "a non-integral value divides as a double",
    );
  });

  it("supports IS [NOT] NULL, EXISTS, [NOT] IN, [NOT] LIKE with ESCAPE, sys. and user. scopes, [names]", () => {
    assert.equal(matches("missing IS NULL AND present IS NOT NULL", { present: 1 }), true);
    assert.equal(matches("EXISTS(present) AND NOT EXISTS(missing)", { present: 1 }), true);
    assert.equal(matches("region IN ('eu', 'uk')", { region: "uk" }), true);
    assert.equal(matches("region NOT IN ('eu', 'uk')", { region: "us" }), true);
    assert.equal(matches("name LIKE 'ab%' AND code LIKE 'x_z'", { name: "abc", code: "xyz" }), true);
    assert.equal(matches("name LIKE '50!%' ESCAPE '!'", { name: "50%" }), true);
    assert.equal(matches("name LIKE '50!%' ESCAPE '!'", { name: "500" }), false);
    assert.equal(matches("name NOT LIKE 'a%'", { name: "b" }), true);
    assert.equal(
      matches("sys.Label = 'X' AND user.[my-prop] = 'it''s'", { "my-prop": "it's" }, { Label: "X" }),
      true,
    );
    assert.equal(matches("sys.subject = 'X'", {}, { Subject: "X" }), true, "sys names are case-insensitive");
    assert.equal(matches("1=1", {}), true);
    assert.equal(matches("flag = TRUE", { flag: true }), true);
  });

  it("refuses what it does not support, naming it and its position", () => {
    assert.throws(
      () => parseSqlFilter("newid() = 'x'"),
      /functions \(newid\(\)\) are not supported.*position 6/,
    );
    assert.throws(() => parseSqlFilter("a = @p"), /parameters \(@name\) are not supported/);
    assert.throws(() => parseSqlFilter("sys.DeliveryCount > 1"), /sys.DeliveryCount is not supported/);
    assert.throws(() => parseSqlFilter("a = 'open"), SqlFilterError);
    assert.throws(() => parseSqlFilter("a = 1 b"), /unexpected 'b' at position 7/);
    assert.throws(() => parseSqlFilter("a IS 1"), /expected NULL after IS/);
  });
});

describe("broker config: topics", () => {
  function topic(subscription: Record<string, unknown>): unknown {
    return {
      UserConfig: {
        Namespaces: [{ Name: "n", Topics: [{ Name: "t", Subscriptions: [{ Name: "s", ...subscription }] }] }],
      },
    };
  }
  const rule = (Properties: Record<string, unknown>) => ({ Rules: [{ Name: "r1", Properties }] });

  it("gives a subscription without rules the $Default true filter, and its name-derived entity path", () => {
    const config = parseConfig(topic({ Properties: { MaxDeliveryCount: 3, LockDuration: "PT10S" } }));
    const sub = config.topics[0]!.subscriptions[0]!;
    assert.equal(sub.queue.name, "t/Subscriptions/s");
    assert.equal(sub.queue.maxDeliveryCount, 3);
    assert.equal(sub.queue.lockDurationMs, 10_000);
    assert.equal(sub.queue.requiresDuplicateDetection, false, "duplicate detection is the topic's");
    assert.deepEqual(
      sub.rules.map((r) => r.name),
      ["$Default"],
    );
  });

  it("warns of a rule name Azure refuses ($Default, a leading or trailing symbol) and takes the ones it accepts", () => {
    const named = (Name: string) =>
      parseConfig(
        topic({ Rules: [{ Name, Properties: { FilterType: "Sql", SqlFilter: { SqlExpression: "1=1" } } }] }),
      ).warnings;
    for (const name of ["$Default", "-a", "a_", "a b", "é"]) {
      const warnings = named(name);
      assert.equal(warnings.length, 1, name);
      assert.match(warnings[0]!, /Rules\[0\]\.Name .* is not a rule name Azure accepts/);
    }
    for (const name of ["sbinbox", "a", "A.b-c_9", "x".repeat(50)]) assert.deepEqual(named(name), [], name);
  });

  it("refuses at load a bad SQL filter, a rule action, an unknown filter type or correlation field", () => {
    assert.throws(
      () =>
        parseConfig(topic(rule({ FilterType: "Sql", SqlFilter: { SqlExpression: "property('x') = 1" } }))),
      /Subscriptions\[0\]\.Rules\[0\]\.Properties\.SqlFilter\.SqlExpression of rule "r1": functions \(property\(\)\)/,
    );
    assert.throws(
      () =>
        parseConfig(
          topic(
            rule({
              FilterType: "Sql",
              SqlFilter: { SqlExpression: "1=1" },
              Action: { SqlExpression: "SET a = 1" },
            }),
          ),
        ),
      /Rules\[0\]\.Properties\.Action of rule "r1" is not supported/,
    );
    assert.throws(
      () => parseConfig(topic(rule({ FilterType: "Boolean" }))),
      /FilterType of rule "r1" must be/,
    );
    assert.throws(
      () => parseConfig(topic(rule({ FilterType: "Correlation", CorrelationFilter: { Color: "red" } }))),
      /CorrelationFilter\.Color is not a correlation filter field/,
    );
    assert.throws(
      () => parseConfig(topic({ Properties: { RequiresSession: 1 } })),
      /RequiresSession must be true or false/,
    );
    assert.equal(
      parseConfig(topic({ Properties: { RequiresSession: true } })).topics[0]!.subscriptions[0]!.queue
        .requiresSession,
      true,
    );
    assert.throws(
      () =>
        parseConfig({
          UserConfig: {
            Namespaces: [
              { Name: "n", Queues: [{ Name: "t" }], Topics: [{ Name: "T", Subscriptions: [{ Name: "s" }] }] },
            ],
          },
        }),
      /Topics\[0\]\.Name "T" is declared twice/,
    );
  });
});
