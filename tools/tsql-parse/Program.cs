// Parses T-SQL with Microsoft's own parser (ScriptDom) and fails on any syntax error.
// Input: a JSON array of { "name": "...", "sql": "..." } on stdin, or file paths as arguments.
// Output: one line per error naming the item and the line; exit code 1 when any item fails to parse.
using System.Text.Json;
using Microsoft.SqlServer.TransactSql.ScriptDom;

var items = new List<(string Name, string Sql)>();
if (args.Length > 0)
{
    foreach (var path in args) items.Add((path, File.ReadAllText(path)));
}
else
{
    var input = Console.In.ReadToEnd();
    using var doc = JsonDocument.Parse(input);
    foreach (var element in doc.RootElement.EnumerateArray())
    {
        var name = element.GetProperty("name").GetString() ?? "(unnamed)";
        var sql = element.GetProperty("sql").GetString() ?? "";
        items.Add((name, sql));
    }
}

if (items.Count == 0)
{
    Console.Error.WriteLine("tsql-parse: nothing to parse");
    return 2;
}

var failures = 0;
foreach (var (name, sql) in items)
{
    // SQL Server 2022 / Azure SQL grammar; QUOTED_IDENTIFIER on, as tedious and mssql set it.
    var parser = new TSql160Parser(initialQuotedIdentifiers: true);
    using var reader = new StringReader(sql);
    parser.Parse(reader, out IList<ParseError> errors);
    if (errors.Count > 0) failures++;
    foreach (var error in errors)
    {
        Console.Error.WriteLine($"{name}: line {error.Line}, column {error.Column}: error {error.Number}: {error.Message}");
    }
}

Console.WriteLine($"tsql-parse: {items.Count} parsed, {failures} with errors");
return failures == 0 ? 0 : 1;
