// A second, independent client for the local broker: Microsoft's .NET SDK (Azure.Messaging.ServiceBus) runs the
// core scenarios against the broker named by a connection string. Exits 1 if any scenario fails.
// usage: sb-client "<connection string>" [queue]   (the queue must require duplicate detection)
using Azure.Messaging.ServiceBus;

if (args.Length < 1)
{
    Console.Error.WriteLine("usage: sb-client \"<connection string>\" [queue]");
    return 2;
}
var connectionString = args[0];
var queue = args.Length > 1 ? args[1] : "sbinbox";
var run = Guid.NewGuid().ToString("N")[..8];
var failures = 0;

await using var client = new ServiceBusClient(connectionString, new ServiceBusClientOptions
{
    RetryOptions = new ServiceBusRetryOptions { MaxRetries = 1, TryTimeout = TimeSpan.FromSeconds(10) },
});
await using var sender = client.CreateSender(queue);
await using var receiver = client.CreateReceiver(queue, new ServiceBusReceiverOptions { ReceiveMode = ServiceBusReceiveMode.PeekLock });
await using var deadLetters = client.CreateReceiver(queue, new ServiceBusReceiverOptions { SubQueue = SubQueue.DeadLetter });

async Task Scenario(string name, Func<Task> body)
{
    try
    {
        await body();
        Console.WriteLine($"PASS {name}");
    }
    catch (Exception e)
    {
        failures++;
        Console.WriteLine($"FAIL {name}: {e.GetType().Name}: {e.Message}");
    }
}

void Check(bool condition, string what)
{
    if (!condition) throw new InvalidOperationException(what);
}

async Task<ServiceBusReceivedMessage> ReceiveOne(ServiceBusReceiver from)
{
    for (var i = 0; i < 5; i++)
    {
        var message = await from.ReceiveMessageAsync(TimeSpan.FromSeconds(2));
        if (message != null) return message;
    }
    throw new InvalidOperationException("no message arrived");
}

await Scenario("send with MessageId, peek-lock receive, properties round-trip, complete", async () =>
{
    var sent = new ServiceBusMessage(BinaryData.FromString("hello from .NET"))
    {
        MessageId = $"dotnet-{run}-1",
        CorrelationId = "corr-1",
        Subject = "Greeting",
        ContentType = "text/plain",
    };
    sent.ApplicationProperties["count"] = 5L;
    sent.ApplicationProperties["name"] = "x";
    await sender.SendMessageAsync(sent);
    var received = await ReceiveOne(receiver);
    Check(received.MessageId == sent.MessageId, $"MessageId {received.MessageId}");
    Check(received.Body.ToString() == "hello from .NET", $"body {received.Body}");
    Check(received.CorrelationId == "corr-1" && received.Subject == "Greeting" && received.ContentType == "text/plain", "properties");
    Check(received.ApplicationProperties["count"] is long l && l == 5L, $"count is {received.ApplicationProperties["count"]?.GetType().Name}");
    Check(received.DeliveryCount == 1, $"DeliveryCount {received.DeliveryCount} (the .NET SDK counts the first delivery as 1)");
    Check(received.SequenceNumber > 0, $"SequenceNumber {received.SequenceNumber}");
    Check(received.LockedUntil > DateTimeOffset.UtcNow, $"LockedUntil {received.LockedUntil}");
    await receiver.CompleteMessageAsync(received);
    var rest = await receiver.PeekMessageAsync();
    Check(rest == null, "the queue is empty after complete");
});

await Scenario("duplicate MessageId inside the window is dropped", async () =>
{
    var id = $"dotnet-{run}-dup";
    await sender.SendMessageAsync(new ServiceBusMessage("first") { MessageId = id });
    await sender.SendMessageAsync(new ServiceBusMessage("second") { MessageId = id });
    var first = await ReceiveOne(receiver);
    Check(first.Body.ToString() == "first", $"body {first.Body}");
    await receiver.CompleteMessageAsync(first);
    var second = await receiver.ReceiveMessageAsync(TimeSpan.FromSeconds(1));
    Check(second == null, "the duplicate was delivered");
});

await Scenario("abandon redelivers with the delivery count raised", async () =>
{
    await sender.SendMessageAsync(new ServiceBusMessage("again") { MessageId = $"dotnet-{run}-abandon" });
    var first = await ReceiveOne(receiver);
    await receiver.AbandonMessageAsync(first);
    var second = await ReceiveOne(receiver);
    Check(second.MessageId == first.MessageId, $"MessageId {second.MessageId}");
    Check(second.DeliveryCount == first.DeliveryCount + 1, $"DeliveryCount {first.DeliveryCount} then {second.DeliveryCount}");
    Check(second.LockToken != first.LockToken, "a new lock token");
    await receiver.CompleteMessageAsync(second);
});

await Scenario("settling with a lost lock fails with MessageLockLost", async () =>
{
    await sender.SendMessageAsync(new ServiceBusMessage("twice") { MessageId = $"dotnet-{run}-lost" });
    var message = await ReceiveOne(receiver);
    await receiver.CompleteMessageAsync(message);
    try
    {
        await receiver.CompleteMessageAsync(message);
        throw new InvalidOperationException("a second complete succeeded");
    }
    catch (ServiceBusException e) when (e.Reason == ServiceBusFailureReason.MessageLockLost)
    {
    }
});

await Scenario("renew-lock by lock token extends LockedUntil (the token's byte order matches)", async () =>
{
    await sender.SendMessageAsync(new ServiceBusMessage("slow") { MessageId = $"dotnet-{run}-renew" });
    var message = await ReceiveOne(receiver);
    var before = message.LockedUntil;
    await Task.Delay(1100);
    await receiver.RenewMessageLockAsync(message);
    Check(message.LockedUntil >= before.AddSeconds(1), $"LockedUntil {before:O} then {message.LockedUntil:O}");
    await receiver.CompleteMessageAsync(message);
});

await Scenario("dead-letter with reason, then read the dead-letter queue", async () =>
{
    await sender.SendMessageAsync(new ServiceBusMessage("poison") { MessageId = $"dotnet-{run}-dead" });
    var message = await ReceiveOne(receiver);
    await receiver.DeadLetterMessageAsync(message, "DotnetReason", "a description");
    var dead = await ReceiveOne(deadLetters);
    Check(dead.MessageId == message.MessageId, $"MessageId {dead.MessageId}");
    Check(dead.DeadLetterReason == "DotnetReason", $"DeadLetterReason {dead.DeadLetterReason}");
    Check(dead.DeadLetterErrorDescription == "a description", $"DeadLetterErrorDescription {dead.DeadLetterErrorDescription}");
    Check(dead.DeadLetterSource == queue, $"DeadLetterSource {dead.DeadLetterSource}");
    await deadLetters.CompleteMessageAsync(dead);
});

await Scenario("an unknown queue gives MessagingEntityNotFound", async () =>
{
    await using var nowhere = client.CreateSender($"no-such-queue-{run}");
    try
    {
        await nowhere.SendMessageAsync(new ServiceBusMessage("lost"));
        throw new InvalidOperationException("the send succeeded");
    }
    catch (ServiceBusException e) when (e.Reason == ServiceBusFailureReason.MessagingEntityNotFound)
    {
        // The reason alone is not enough: the SDK also reports some connection failures under it.
        Check(e.Message.Contains("could not be found"), $"unexpected message: {e.Message}");
    }
});

Console.WriteLine(failures == 0 ? "all scenarios passed" : $"{failures} scenario(s) failed");
return failures == 0 ? 0 : 1;
