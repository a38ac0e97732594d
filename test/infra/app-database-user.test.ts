import assert from "node:assert/strict";
import { appRoles, appUserBatch, sidLiteral } from "../../src/inbox/sqlserver/app-user.ts";

const clientId = "01020304-0506-0708-090a-0b0c0d0e0f10";

describe("the worker's database user (sbinbox migrate --app-user)", function () {
  it("gets read and write rights only, never DDL or ownership", function () {
    assert.deepEqual([...appRoles], ["db_datareader", "db_datawriter"]);
    const batch = appUserBatch("id-sbinbox-worker-abc123", clientId);
    assert.match(batch, /ALTER ROLE \[db_datareader\] ADD MEMBER \[id-sbinbox-worker-abc123\];/);
    assert.match(batch, /ALTER ROLE \[db_datawriter\] ADD MEMBER \[id-sbinbox-worker-abc123\];/);
    assert.doesNotMatch(batch, /db_owner|db_ddladmin/);
  });

  it("is created by SID from the client ID, in SQL Server's GUID byte order, never looked up in Graph", function () {
    assert.equal(sidLiteral(clientId), "0x0403020106050807090A0B0C0D0E0F10");
    const batch = appUserBatch("id-x", clientId);
    assert.match(batch, /CREATE USER \[id-x\] WITH SID = 0x0403020106050807090A0B0C0D0E0F10, TYPE = E/);
    assert.doesNotMatch(batch, /FROM EXTERNAL PROVIDER/);
  });

  it("stops with an error naming the user when it exists with another client ID's SID, before granting anything", function () {
    const batch = appUserBatch("id-x", clientId);
    const lines = batch.split("\n");
    const check = lines.findIndex((l) =>
      l.includes(
        "ELSE IF (SELECT sid FROM sys.database_principals WHERE name = N'id-x') <> 0x0403020106050807090A0B0C0D0E0F10",
      ),
    );
    assert.ok(check > 0, batch);
    assert.match(
      lines[check + 1]!,
      /^ {2}THROW 51000, N'database user \[id-x\] exists with another SID .*DROP USER \[id-x\]/,
    );
    assert.ok(check < lines.findIndex((l) => l.startsWith("ALTER ROLE")), "checked before the grants");
  });

  it("takes managed identity names with underscores", function () {
    assert.match(appUserBatch("id_sbinbox_worker", clientId), /CREATE USER \[id_sbinbox_worker\]/);
    assert.throws(() => appUserBatch("_id", clientId), /--app-user/);
  });

  it("refuses names and IDs that could break out of the brackets", function () {
    assert.throws(() => appUserBatch("app]; DROP TABLE x; --", clientId), /--app-user/);
    assert.throws(() => appUserBatch("app-x", "not-a-guid"), /--app-client-id/);
  });
});
