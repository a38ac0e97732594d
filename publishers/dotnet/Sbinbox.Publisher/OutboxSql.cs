namespace Sbinbox.Publisher;

/// <summary>
/// The outbox insert, as the TypeScript enqueue writes it (src/outbox/*/statements.ts): the rows numbered in the
/// caller's order and inserted ORDER BY that number, so identity values (the relay's send order) follow it. Without
/// the SessionId column when no row has a key, so that an enqueue still works on a database at migration 0001.
/// </summary>
internal static class OutboxSql
{
    private static readonly string[] PostgreSqlColumns =
        ["\"MessageId\"", "\"Type\"", "\"Key\"", "\"Body\"", "\"Properties\"", "\"CorrelationId\"", "\"TraceParent\"", "\"TraceState\"", "\"SessionId\""];

    private static readonly string[] SqlServerColumns =
        ["MessageId", "Type", "[Key]", "Body", "Properties", "CorrelationId", "TraceParent", "TraceState", "SessionId"];

    public const string PostgreSqlNotify = "SELECT pg_notify('" + SbinboxOutbox.NotifyChannel + "', '')";

    public static string Insert(OutboxDialect dialect, int rows, bool withSession)
    {
        var all = dialect == OutboxDialect.PostgreSql ? PostgreSqlColumns : SqlServerColumns;
        var columns = withSession ? all : all[..^1];
        var width = columns.Length;
        // PostgreSQL names the derived table's columns plainly (c1..), SQL Server reuses the column names.
        var names = dialect == OutboxDialect.PostgreSql
            ? Enumerable.Range(1, width).Select(c => $"c{c}").ToArray()
            : columns;
        var values = Enumerable.Range(0, rows).Select(r =>
            $"({r + 1}, {string.Join(", ", Enumerable.Range(1, width).Select(c => $"@p{r * width + c}"))})");
        var table = dialect == OutboxDialect.PostgreSql ? "\"Outbox\"" : "dbo.Outbox";
        return $"INSERT INTO {table} ({string.Join(", ", columns)})\n" +
               $"SELECT {string.Join(", ", names.Select(n => $"v.{n}"))}\n" +
               $"FROM (VALUES\n  {string.Join(",\n  ", values)}\n) AS v (n, {string.Join(", ", names)})\n" +
               "ORDER BY v.n;";
    }
}
