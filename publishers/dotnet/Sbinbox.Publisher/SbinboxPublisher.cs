using System.Text;
using System.Text.Json;
using Azure.Core;
using Azure.Identity;
using Azure.Messaging.ServiceBus;

namespace Sbinbox.Publisher;

/// <summary>
/// Sends events to a queue or topic an sbinbox worker reads: each message with its derived MessageId, the type as
/// subject, <c>application/json</c>, the body as UTF-8 JSON bytes (an AMQP data section). A resend of the same event
/// carries the same MessageId, so the broker's duplicate detection, and after its window the worker's inbox, drop it.
/// </summary>
public sealed class SbinboxPublisher : IAsyncDisposable
{
    private readonly ServiceBusSender sender;
    private readonly ServiceBusClient? ownedClient;
    private readonly JsonSerializerOptions? json;

    /// <summary>A publisher on your own client (its retry options apply); the client stays yours to dispose.</summary>
    public SbinboxPublisher(ServiceBusClient client, string queueOrTopic, JsonSerializerOptions? json = null)
    {
        ArgumentNullException.ThrowIfNull(client);
        sender = client.CreateSender(queueOrTopic);
        this.json = json;
    }

    // The factories' client, disposed with the publisher (the marker tells it from the public constructor).
    private SbinboxPublisher(ServiceBusClient owned, string queueOrTopic, JsonSerializerOptions? json, bool owns)
        : this(owned, queueOrTopic, json) => ownedClient = owns ? owned : null;

    /// <summary>
    /// A publisher on a namespace through Microsoft Entra ID (<see cref="DefaultAzureCredential"/> unless a credential
    /// is given: managed identity in Azure, your developer login locally). The identity needs Azure Service Bus Data
    /// Sender on the entity. <paramref name="json"/> serialises the bodies, as on the constructor.
    /// </summary>
    public static SbinboxPublisher Create(string fullyQualifiedNamespace, string queueOrTopic, TokenCredential? credential = null, JsonSerializerOptions? json = null) =>
        new(new ServiceBusClient(fullyQualifiedNamespace, credential ?? new DefaultAzureCredential()), queueOrTopic, json, owns: true);

    /// <summary>A publisher from a connection string (the local broker's, or a SAS one where Entra ID is not used).</summary>
    public static SbinboxPublisher FromConnectionString(string connectionString, string queueOrTopic, JsonSerializerOptions? json = null) =>
        new(new ServiceBusClient(connectionString), queueOrTopic, json, owns: true);

    /// <summary>The message sbinbox sends for an event (checked: an <see cref="ArgumentException"/> names what is wrong).</summary>
    public ServiceBusMessage ToMessage(SbinboxEvent e) => ToMessage(e, "event");

    private ServiceBusMessage ToMessage(SbinboxEvent e, string where)
    {
        ArgumentNullException.ThrowIfNull(e);
        var (messageId, body) = e.Check(where, json);
        var message = new ServiceBusMessage(BinaryData.FromBytes(Encoding.UTF8.GetBytes(body)))
        {
            MessageId = messageId,
            Subject = e.Type,
            ContentType = "application/json",
            CorrelationId = e.CorrelationId,
        };
        if (e.SessionId is not null)
        {
            message.SessionId = e.SessionId;
            message.PartitionKey = e.SessionId;
        }
        foreach (var (name, value) in e.Properties ?? new Dictionary<string, object>())
            message.ApplicationProperties[name] = value;
        return message;
    }

    /// <summary>Sends one event; returns its MessageId.</summary>
    public async Task<string> PublishAsync(string type, string key, object? body, CancellationToken cancellationToken = default) =>
        (await PublishBatchAsync([new SbinboxEvent(type, key, body)], cancellationToken))[0];

    /// <summary>
    /// Checks and builds every event first (a bad one fails the call with nothing sent), then sends them in order in
    /// batches filled to the entity's size limit, a new batch wherever the session key changes (a partitioned entity
    /// refuses a batch of several partition keys). Returns the MessageIds in order. A failed call is safe to repeat:
    /// the ids are the same.
    /// </summary>
    public async Task<IReadOnlyList<string>> PublishBatchAsync(IEnumerable<SbinboxEvent> events, CancellationToken cancellationToken = default)
    {
        var messages = events.Select((e, i) => ToMessage(e, $"event {i}")).ToList();
        var batch = await sender.CreateMessageBatchAsync(cancellationToken);
        try
        {
            string? batchSession = null;
            foreach (var message in messages)
            {
                if (batch.Count > 0 && message.SessionId != batchSession)
                    batch = await SendAndRenew(batch, cancellationToken);
                batchSession = message.SessionId;
                if (batch.TryAddMessage(message)) continue;
                if (batch.Count == 0)
                    throw new ArgumentException($"event {message.MessageId} is larger than the entity's maximum message size ({batch.MaxSizeInBytes} bytes)");
                batch = await SendAndRenew(batch, cancellationToken);
                if (!batch.TryAddMessage(message))
                    throw new ArgumentException($"event {message.MessageId} is larger than the entity's maximum message size ({batch.MaxSizeInBytes} bytes)");
            }
            if (batch.Count > 0) await sender.SendMessagesAsync(batch, cancellationToken);
        }
        finally
        {
            batch.Dispose();
        }
        return messages.Select(m => m.MessageId).ToList();
    }

    private async Task<ServiceBusMessageBatch> SendAndRenew(ServiceBusMessageBatch full, CancellationToken cancellationToken)
    {
        await sender.SendMessagesAsync(full, cancellationToken);
        full.Dispose();
        return await sender.CreateMessageBatchAsync(cancellationToken);
    }

    /// <inheritdoc />
    public async ValueTask DisposeAsync()
    {
        await sender.DisposeAsync();
        if (ownedClient is not null) await ownedClient.DisposeAsync();
    }
}
