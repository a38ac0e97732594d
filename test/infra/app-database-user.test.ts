import assert from "node:assert/strict";
import { appRoles, grantBatch, sidLiteral } from "../../scripts/app-database-user.ts";

describe("the post-provision database user", function () {
  it("gets read and write rights only, never DDL or ownership", function () {
    assert.deepEqual([...appRoles], ["db_datareader", "db_datawriter"]);
    const batch = grantBatch("app-sbinbox-abc123");
    assert.match(batch, /CREATE USER \[app-sbinbox-abc123\] FROM EXTERNAL PROVIDER/);
    assert.match(batch, /ALTER ROLE \[db_datareader\] ADD MEMBER \[app-sbinbox-abc123\];/);
    assert.match(batch, /ALTER ROLE \[db_datawriter\] ADD MEMBER \[app-sbinbox-abc123\];/);
    assert.doesNotMatch(batch, /db_owner|db_ddladmin/);
  });

  it("is created by SID from the client ID when one is given, in SQL Server's GUID byte order", function () {
    assert.equal(sidLiteral("01020304-0506-0708-090a-0b0c0d0e0f10"), "0x0403020106050807090A0B0C0D0E0F10");
    assert.match(
      grantBatch("app-x", "01020304-0506-0708-090a-0b0c0d0e0f10"),
      /CREATE USER \[app-x\] WITH SID = 0x0403020106050807090A0B0C0D0E0F10, TYPE = E/,
    );
  });

  it("refuses names and IDs that could break out of the brackets", function () {
    assert.throws(() => grantBatch("app]; DROP TABLE x; --"), /WORKER_APP_NAME/);
    assert.throws(() => grantBatch("app-x", "not-a-guid"), /WORKER_APP_CLIENT_ID/);
  });
});
