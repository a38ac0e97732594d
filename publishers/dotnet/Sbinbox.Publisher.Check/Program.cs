// The .NET publisher's checks (scripts/publishers-check.ts runs them):
//   vectors <message-id-vectors.json>            the shared MessageId vectors and the refused names
//   e2e <broker connection string> <queue> <PostgreSQL connection string> <first note id>
// e2e publishes notes first+1..first+11 (first+1..first+5 and first+11 again: resends), and enqueues in the outbox
// first+21..first+30 and first+36 in committed transactions, first+31..first+35 and first+37..first+38 in rolled-back
// ones, each beside a row of "UpstreamChanges" (the business change). Its last line is a JSON summary.
using System.Text.Json;
using System.Text.Json.Nodes;
using Npgsql;
using Sbinbox.Publisher;

return args switch
{
    ["vectors", var file] => Vectors(file),
    ["e2e", var broker, var queue, var postgres, var first] => await EndToEnd(broker, queue, postgres, int.Parse(first)),
    _ => Usage(),
};

static int Usage()
{
    Console.Error.WriteLine("usage: sbinbox-publisher-check vectors <file> | e2e <broker> <queue> <postgres> <first note id>");
    return 2;
}

static int Vectors(string file)
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
    foreach (var f in failures) Console.WriteLine($"vectors: FAILED {f}");
    Console.WriteLine($"vectors: {derived.Count} derived ids, {refused.Count} refused names, {failures.Count} failures");
    return failures.Count == 0 ? 0 : 1;
}

// Refused names come as UTF-16 code units: System.Text.Json refuses a lone surrogate in a JSON string.
static string Units(JsonNode units) => new(units.AsArray().Select(u => (char)(int)u!).ToArray());

static async Task<int> EndToEnd(string broker, string queue, string postgres, int first)
{
    static SbinboxEvent Note(int id) => new("NoteCreated", $"note-{id}", new { noteId = id, text = $"from .NET, note {id}" });
    static IEnumerable<int> Range(int from, int to) => Enumerable.Range(from, to - from + 1);

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
            await using var change = new NpgsqlCommand("INSERT INTO \"UpstreamChanges\" (\"NoteId\", \"Language\") VALUES ($1, 'dotnet')", connection, tx);
            change.Parameters.AddWithValue(noteId.GetInt32());
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

    // A bad event fails the enqueue before anything is written, naming it.
    try
    {
        await Transaction([Note(first + 39), new SbinboxEvent("Bad:Type", "1", new { })], commit: true);
        Console.Error.WriteLine("e2e: an event type with ':' was enqueued");
        return 1;
    }
    catch (ArgumentException e) when (e.Message.Contains("outbox event 1"))
    {
    }

    Console.WriteLine(JsonSerializer.Serialize(new { published, committed, rolledBack }));
    return 0;
}
