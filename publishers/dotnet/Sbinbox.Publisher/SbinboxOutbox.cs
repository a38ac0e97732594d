using System.Data;
using System.Data.Common;
using System.Diagnostics;
using System.Text.Json;

namespace Sbinbox.Publisher;

/// <summary>The database the outbox table lives in; <see cref="SbinboxOutbox.DialectOf"/> tells it from the connection.</summary>
public enum OutboxDialect
{
    /// <summary>PostgreSQL (Npgsql): table <c>"Outbox"</c>.</summary>
    PostgreSql,

    /// <summary>SQL Server or Azure SQL (Microsoft.Data.SqlClient): table <c>dbo.Outbox</c>.</summary>
    SqlServer,
}

/// <summary>
/// Writes events into the sbinbox outbox table through the caller's own open <see cref="DbTransaction"/>, so they
/// commit with the caller's business change or not at all; the sbinbox relay sends committed rows afterwards
/// (docs/outbox.md, The contract). Plain ADO.NET: the package depends on no database driver.
/// </summary>
public static class SbinboxOutbox
{
    /// <summary>The NOTIFY channel PostgreSQL relays listen on.</summary>
    public const string NotifyChannel = "sbinbox_outbox";

    /// <summary>Rows a SQL Server insert takes: 2,100 parameters a request, 2 of them sp_executesql's, 9 a row.</summary>
    public const int SqlServerRowsPerInsert = 233;

    /// <summary>Spans named <c>create outbox</c>, the parent of the relay's send span, as the TypeScript enqueue opens.</summary>
    public static readonly ActivitySource ActivitySource = new("Sbinbox.Publisher");

    /// <summary>The dialect of an Npgsql or SqlClient connection; anything else is refused with the type's name.</summary>
    public static OutboxDialect DialectOf(DbConnection connection)
    {
        var name = connection.GetType().FullName ?? "";
        if (name.StartsWith("Npgsql.", StringComparison.Ordinal)) return OutboxDialect.PostgreSql;
        if (name is "Microsoft.Data.SqlClient.SqlConnection" or "System.Data.SqlClient.SqlConnection") return OutboxDialect.SqlServer;
        throw new ArgumentException($"the outbox knows Npgsql and SqlClient connections, not {name}: pass the dialect");
    }

    /// <summary>
    /// Enqueues the events in the order given, inside <paramref name="transaction"/> (enqueue after your business
    /// writes, so that two transactions touching the same rows get outbox Ids in their commit order). Returns each
    /// event's MessageId. Nothing is sent here. On PostgreSQL a pg_notify wakes the relays at commit unless
    /// <paramref name="notify"/> is false (the notify serialises notifying commits: docs/outbox.md).
    /// </summary>
    public static async Task<IReadOnlyList<string>> EnqueueAsync(
        DbTransaction transaction,
        IEnumerable<SbinboxEvent> events,
        bool notify = true,
        OutboxDialect? dialect = null,
        JsonSerializerOptions? json = null,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(transaction);
        var connection = transaction.Connection
            ?? throw new InvalidOperationException("the transaction has ended (its Connection is null): enqueue inside an open transaction");
        var rows = events.Select((e, i) => OutboxRow.Of(e, $"outbox event {i} ({e?.Type}:{e?.Key})", json)).ToList();
        if (rows.Count == 0) return [];
        var on = dialect ?? DialectOf(connection);
        using var activity = ActivitySource.StartActivity("create outbox", ActivityKind.Producer);
        activity?.SetTag("messaging.system", "servicebus");
        activity?.SetTag("messaging.operation.type", "create");
        activity?.SetTag("messaging.batch.message_count", rows.Count);
        // The relay's send span continues this context; with no listener the caller's own activity, if any.
        var context = activity ?? Activity.Current;
        var traceParent = context?.IdFormat == ActivityIdFormat.W3C ? context.Id : null;
        var traceState = traceParent is null ? null : context?.TraceStateString;
        var withSession = rows.Any(r => r.SessionId is not null);
        try
        {
            foreach (var chunk in rows.Chunk(on == OutboxDialect.SqlServer ? SqlServerRowsPerInsert : 1000))
                await Execute(connection, transaction, OutboxSql.Insert(on, chunk.Length, withSession),
                    chunk.SelectMany(r => r.Values(traceParent, traceState, withSession)), cancellationToken);
            if (notify && on == OutboxDialect.PostgreSql)
                await Execute(connection, transaction, OutboxSql.PostgreSqlNotify, [], cancellationToken);
        }
        catch (DbException e) when (withSession && e.Message.Contains("SessionId", StringComparison.OrdinalIgnoreCase))
        {
            activity?.SetStatus(ActivityStatusCode.Error, e.Message);
            throw new InvalidOperationException(
                "enqueue: an event has a sessionId, but the Outbox table may have no SessionId column: run the outbox migration 0002_outbox_session first (sbinbox migrate --outbox)", e);
        }
        catch (Exception e)
        {
            activity?.SetStatus(ActivityStatusCode.Error, e.Message);
            throw;
        }
        return rows.Select(r => r.MessageId).ToList();
    }

    private static async Task Execute(DbConnection connection, DbTransaction transaction, string sql, IEnumerable<object?> values, CancellationToken cancellationToken)
    {
        await using var command = connection.CreateCommand();
        command.Transaction = transaction;
        command.CommandText = sql;
        var n = 0;
        foreach (var value in values)
        {
            var parameter = command.CreateParameter();
            parameter.ParameterName = $"@p{++n}";
            parameter.DbType = DbType.String;
            parameter.Value = value ?? DBNull.Value;
            command.Parameters.Add(parameter);
        }
        await command.ExecuteNonQueryAsync(cancellationToken);
    }
}

/// <summary>One checked outbox row: the columns an enqueuer writes (docs/outbox.md, The contract).</summary>
internal sealed record OutboxRow(string MessageId, string Type, string Key, string Body, string? Properties, string? CorrelationId, string? SessionId)
{
    public static OutboxRow Of(SbinboxEvent e, string where, JsonSerializerOptions? json)
    {
        if (e is null) throw new ArgumentException($"{where} is null");
        var (messageId, body) = e.Check(where, json);
        var properties = e.Properties is null ? null : JsonSerializer.Serialize(e.Properties);
        if (e.CorrelationId is { Length: > 128 }) throw new ArgumentException($"{where}: correlationId is longer than 128 characters");
        return new OutboxRow(messageId, e.Type, e.Key, body, properties, e.CorrelationId, e.SessionId);
    }

    public IEnumerable<object?> Values(string? traceParent, string? traceState, bool withSession)
    {
        object?[] values = [MessageId, Type, Key, Body, Properties, CorrelationId, traceParent, traceState];
        return withSession ? [.. values, SessionId] : values;
    }
}
