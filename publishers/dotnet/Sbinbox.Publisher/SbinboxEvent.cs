using System.Text.Json;

namespace Sbinbox.Publisher;

/// <summary>
/// One event: its type (the message's subject, the worker's handler), its business key (with the type, the
/// MessageId), a body serialised as JSON, and optionally a session key and extra application properties.
/// </summary>
public sealed record SbinboxEvent(string Type, string Key, object? Body)
{
    /// <summary>The session key (usually the aggregate's id) for a session-enabled entity; also the partition key.</summary>
    public string? SessionId { get; init; }

    /// <summary>Extra application properties (strings, numbers, booleans); the trace properties are set by the sender.</summary>
    public IReadOnlyDictionary<string, object>? Properties { get; init; }

    /// <summary>The message's correlation id, if any.</summary>
    public string? CorrelationId { get; init; }

    private static readonly HashSet<string> ReservedProperties = new(StringComparer.OrdinalIgnoreCase)
    {
        "traceparent", "tracestate", "Diagnostic-Id",
    };

    /// <summary>
    /// Checks the event as every sbinbox publisher does and returns its MessageId and body's JSON text; an
    /// <see cref="ArgumentException"/> names what is wrong (<paramref name="where"/> says which event).
    /// </summary>
    internal (string MessageId, string Json) Check(string where, JsonSerializerOptions? json)
    {
        if (Type is null || Key is null) throw new ArgumentException($"{where}: type and key must be given");
        if (Type.Length > 200) throw new ArgumentException($"{where}: type is longer than 200 characters");
        if (Key.Length > 400) throw new ArgumentException($"{where}: key is longer than 400 characters");
        string messageId;
        try
        {
            messageId = MessageIds.Derive(Type, Key);
        }
        catch (ArgumentException e)
        {
            throw new ArgumentException($"{where}: {e.Message}", e);
        }
        if (SessionId is not null && (SessionId.Length == 0 || SessionId.Length > 128))
            throw new ArgumentException($"{where}: sessionId must be 1 to 128 characters (Service Bus's limit)");
        foreach (var (name, value) in Properties ?? new Dictionary<string, object>())
        {
            if (ReservedProperties.Contains(name))
                throw new ArgumentException($"{where}: property \"{name}\" is set by the sender");
            if (value is not (string or bool or int or long or double or float or decimal or short or byte))
                throw new ArgumentException($"{where}: property \"{name}\" must be a string, number or boolean");
            // JSON has no NaN or infinity: the relay would set such an outbox row aside as not JSON.
            if (value is double d && !double.IsFinite(d) || value is float f && !float.IsFinite(f))
                throw new ArgumentException($"{where}: property \"{name}\" is {value}, not a finite number");
        }
        return (messageId, JsonSerializer.Serialize(Body, json));
    }
}
