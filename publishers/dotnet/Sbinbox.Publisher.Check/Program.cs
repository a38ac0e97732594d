// The .NET publisher's checks (scripts/publishers-check.ts runs them):
//   vectors <message-id-vectors.json>            the shared MessageId vectors and the refused names
//   e2e <broker connection string> <queue> <PostgreSQL connection string> <first note id> [<SQL Server one>]
// e2e publishes notes first+1..first+11 (first+1..first+5 and first+11 again: resends), and enqueues in the outbox
// first+21..first+30 and first+36 in committed transactions, first+31..first+35 and first+37..first+38 in rolled-back
// ones, each beside a row of "UpstreamChanges" (the business change); with a SQL Server connection string the same
// enqueues 50 notes on in dbo.Outbox. Its last line is a JSON summary.
using System.Data.Common;
using System.Text.Json;
using System.Text.Json.Nodes;
using Microsoft.Data.SqlClient;
using Npgsql;
using Sbinbox.Publisher;

return args switch
{
    ["vectors", var file] => await Vectors(file),
    ["e2e", var broker, var queue, var postgres, var first] => await EndToEnd(broker, queue, postgres, int.Parse(first), null),
    ["e2e", var broker, var queue, var postgres, var first, var sqlServer] => await EndToEnd(broker, queue, postgres, int.Parse(first), sqlServer),
    _ => Usage(),
};

static int Usage()
{
    Console.Error.WriteLine("usage: sbinbox-publisher-check vectors <file> | e2e <broker> <queue> <postgres> <first note id>");
    return 2;
}

static async Task<int> Vectors(string file)
{
    var vectors = JsonNode.Parse(File.ReadAllText(file))!;
    var failures = new List<string>();
    if ((string?)vectors["namespace"] != MessageIds.Namespace) failures.Add("the namespace differs");
    var derived = vectors["derived"]!.AsArray();
    foreach (var v in derived)
    {
        var (type, key, id) = ((string)v!["type"]!, (string)v["key"]!, (string)v["messageId"]!);
        var got = MessageIds.Derive(type, key);
        if (got != id) failures.Add($"{type}:{key[..Math.Min(key.Length, 20)]} gave {got}, not {id}");
    }
    foreach (var v in vectors["uuidV5"]!.AsArray())
    {
        var got = MessageIds.UuidV5((string)v!["name"]!, (string)v["namespace"]!);
        if (got != (string)v["id"]!) failures.Add($"uuidV5({v["name"]}) gave {got}");
    }
    var refused = vectors["refused"]!.AsArray();
    foreach (var v in refused)
    {
        try
        {
            MessageIds.Derive(Units(v!["typeUnits"]!), Units(v["keyUnits"]!));
            failures.Add($"not refused: {v["why"]}");
        }
        catch (ArgumentException) { }
    }
    // Events every publisher refuses (lengths in UTF-16 units). Building the message connects nowhere.
    var refusedEvents = vectors["refusedEvents"]!.AsArray();
    await using var offline = SbinboxPublisher.FromConnectionString(Offline.Broker, "q");
    foreach (var v in refusedEvents)
    {
        try
        {
            offline.ToMessage(new SbinboxEvent((string)v!["type"]!, (string)v["key"]!, new { }) { SessionId = (string?)v["sessionId"] });
            failures.Add($"event not refused: {v["why"]}");
        }
        catch (ArgumentException) { }
    }
    foreach (var nonFinite in new object[] { double.NaN, double.PositiveInfinity, float.NegativeInfinity })
    {
        try
        {
            offline.ToMessage(new SbinboxEvent("T", "1", new { }) { Properties = new Dictionary<string, object> { ["n"] = nonFinite } });
            failures.Add($"a property of {nonFinite} was not refused");
        }
        catch (ArgumentException e) when (e.Message.StartsWith("event: property \"n\" is") && e.Message.Contains("not a finite number")) { }
    }
    // The factories take the bodies' serializer options, as the constructor does.
    await using (var snake = SbinboxPublisher.FromConnectionString(Offline.Broker, "q", new JsonSerializerOptions { PropertyNamingPolicy = JsonNamingPolicy.SnakeCaseLower }))
    {
        var body = snake.ToMessage(new SbinboxEvent("T", "1", new { NoteId = 1 })).Body.ToString();
        if (body != "{\"note_id\":1}") failures.Add($"FromConnectionString's JSON options were not used: {body}");
    }
    foreach (var f in failures) Console.WriteLine($"vectors: FAILED {f}");
    Console.WriteLine($"vectors: {derived.Count} derived ids, {refused.Count} refused names, {refusedEvents.Count} refused events, {failures.Count} failures");
    return failures.Count == 0 ? 0 : 1;
}

// Refused names come as UTF-16 code units: System.Text.Json refuses a lone surrogate in a JSON string.
static string Units(JsonNode units) => new(units.AsArray().Select(u => (char)(int)u!).ToArray());

static async Task<int> EndToEnd(string broker, string queue, string postgres, int first, string? sqlServer)
{
    var published = new List<string>();
    await using (var publisher = SbinboxPublisher.FromConnectionString(broker, queue))
    {
        published.AddRange(await publisher.PublishBatchAsync(Range(first + 1, first + 10).Select(Note)));
        await publisher.PublishBatchAsync(Range(first + 1, first + 5).Select(Note)); // a resend: the same ids
        published.Add(await publisher.PublishAsync("NoteCreated", $"note-{first + 11}", new { noteId = first + 11, text = "one" }));
        await publisher.PublishAsync("NoteCreated", $"note-{first + 11}", new { noteId = first + 11, text = "one" });
    }

    await using var connection = new NpgsqlConnection(postgres);
    await connection.OpenAsync();
    var (committed, rolledBack) = await OutboxPlan(connection, "INSERT INTO \"UpstreamChanges\" (\"NoteId\", \"Language\") VALUES (@n, 'dotnet')", first);
    List<string>? committedSqlServer = null, rolledBackSqlServer = null;
    if (sqlServer is not null)
    {
        await using var mssql = new SqlConnection(sqlServer);
        await mssql.OpenAsync();
        (committedSqlServer, rolledBackSqlServer) = await OutboxPlan(mssql, "INSERT INTO dbo.UpstreamChanges (NoteId, Language) VALUES (@n, N'dotnet')", first + 50);
    }
    Console.WriteLine(JsonSerializer.Serialize(new { published, committed, rolledBack, committedSqlServer, rolledBackSqlServer }));
    return 0;
}

static SbinboxEvent Note(int id) => new("NoteCreated", $"note-{id}", new { noteId = id, text = $"from .NET, note {id}" });
static IEnumerable<int> Range(int from, int to) => Enumerable.Range(from, to - from + 1);

// Enqueues first+21..first+30 and first+36 in committed transactions, first+31..35 and first+37..38 in rolled-back
// ones, each beside its business row (changeSql, @n the note id); then a bad event, which must fail the enqueue.
static async Task<(List<string> Committed, List<string> RolledBack)> OutboxPlan(DbConnection connection, string changeSql, int first)
{
    var committed = new List<string>();
    var rolledBack = new List<string>();
    async Task Transaction(IEnumerable<SbinboxEvent> events, bool commit)
    {
        var list = events.ToList();
        await using var tx = await connection.BeginTransactionAsync();
        foreach (var e in list)
        {
            // The business change: the note's own row upstream (the bad event below has none).
            if (!JsonSerializer.SerializeToElement(e.Body).TryGetProperty("noteId", out var noteId)) continue;
            await using var change = connection.CreateCommand();
            change.Transaction = tx;
            change.CommandText = changeSql;
            var n = change.CreateParameter();
            n.ParameterName = "@n";
            n.Value = noteId.GetInt32();
            change.Parameters.Add(n);
            await change.ExecuteNonQueryAsync();
        }
        var ids = await SbinboxOutbox.EnqueueAsync(tx, list);
        if (commit) { await tx.CommitAsync(); committed.AddRange(ids); }
        else { await tx.RollbackAsync(); rolledBack.AddRange(ids); }
    }
    await Transaction(Range(first + 21, first + 30).Select(Note), commit: true);
    await Transaction(Range(first + 31, first + 35).Select(Note), commit: false);
    await Transaction([Note(first + 36) with { Properties = new Dictionary<string, object> { ["origin"] = "dotnet", ["attempt"] = 1 } }], commit: true);
    await Transaction(Range(first + 37, first + 38).Select(Note), commit: false);
    try
    {
        await Transaction([Note(first + 39), new SbinboxEvent("Bad:Type", "1", new { })], commit: true);
        throw new InvalidOperationException("e2e: an event type with ':' was enqueued");
    }
    catch (ArgumentException e) when (e.Message.Contains("outbox event 1"))
    {
    }
    return (committed, rolledBack);
}

static class Offline
{
    /// <summary>A connection string for building messages only: nothing connects to it.</summary>
    public const string Broker = "Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=v";
}
