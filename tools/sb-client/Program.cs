// A second, independent client for the local broker: Microsoft's .NET SDK (Azure.Messaging.ServiceBus) runs the
// behaviours a .NET service uses against the broker named by a connection string. After every scenario the queue
// and its dead-letter queue are peeked: a message of that scenario left behind (lost to a client, or stuck under a
// lock) fails the scenario. Every scenario's message ids start with a prefix of its own, and only those are
// counted, so a message one failed scenario strands (a locked one cannot be purged until its lock expires) fails
// that scenario alone. Exits 1 if any scenario fails.
// usage: sb-client "<connection string>" [queue] [capped-queue] [topic] [session-queue]
//   queue: requires duplicate detection, starts empty. capped-queue (optional): MaxSizeInMegabytes 1, empty.
//   Each prefetch scenario runs on a queue of its own, <queue>-peeklock-<n> and <queue>-receiveanddelete-<n> for
//   PrefetchCount n in 0, 1, 5, 100 (empty, must exist): the defect they guard strands locked messages, which a
//   receiver on a shared queue would get once their lock expires, failing later scenarios too.
//   topic (optional): duplicate detection on, subscriptions "billing" and "ledger" that forward to the queues
//   "billing" and "ledger" (duplicate detection on, empty), as sbinbox deploys a topic.
//   session-queue (optional): RequiresSession true, empty, and <session-queue>-processor likewise (Sessions.cs).
//   SB_CLIENT_ITERATIONS (default 3): receivers opened per prefetch scenario (the defect it guards is a race).
using System.Collections.Concurrent;
using System.Diagnostics;
using Azure.Messaging.ServiceBus;

if (args.Length < 1)
{
    Console.Error.WriteLine("usage: sb-client \"<connection string>\" [queue] [capped-queue] [topic]");
    return 2;
}
var connectionString = args[0];
var queue = args.Length > 1 ? args[1] : "sbinbox";
var cappedQueue = args.Length > 2 && args[2] != "" ? args[2] : null;
var topic = args.Length > 3 ? args[3] : null;
var iterations = int.TryParse(Environment.GetEnvironmentVariable("SB_CLIENT_ITERATIONS"), out var n) && n > 0 ? n : 3;
var run = Guid.NewGuid().ToString("N")[..8];
var failures = 0;
var scenarioNumber = 0;
// The message id prefix of the scenario running now (scenarios run one after another).
var prefix = "";

await using var client = new ServiceBusClient(connectionString, new ServiceBusClientOptions
{
    RetryOptions = new ServiceBusRetryOptions { MaxRetries = 1, TryTimeout = TimeSpan.FromSeconds(10) },
});
await using var sender = client.CreateSender(queue);
await using var receiver = client.CreateReceiver(queue, new ServiceBusReceiverOptions { ReceiveMode = ServiceBusReceiveMode.PeekLock });
await using var deadLetters = client.CreateReceiver(queue, new ServiceBusReceiverOptions { SubQueue = SubQueue.DeadLetter });

async Task Scenario(string name, Func<Task> body, string? on = null)
{
    var entity = on ?? queue;
    scenarioNumber++;
    prefix = $"dotnet-{run}-{scenarioNumber:D2}-";
    string? failure = null;
    try
    {
        await body();
    }
    catch (Exception e)
    {
        failure = $"{e.GetType().Name}: {e.Message}";
    }
    // The count check: whatever the scenario sent must be gone (settled) when it ends.
    var left = await Leftovers(entity, prefix);
    if (left != null)
    {
        failure = (failure == null ? "" : failure + "; ") + $"left in {entity}: {left}";
        await Purge(entity);
    }
    if (failure == null) Console.WriteLine($"PASS {name}");
    else
    {
        failures++;
        Console.WriteLine($"FAIL {name}: {failure}");
    }
}

void Check(bool condition, string what)
{
    if (!condition) throw new InvalidOperationException(what);
}

// The scenario's own messages still in the queue or its dead-letter queue, in any state.
async Task<string?> Leftovers(string entity, string ownPrefix)
{
    var left = new List<string>();
    foreach (var subQueue in new[] { SubQueue.None, SubQueue.DeadLetter })
    {
        await using var peeker = client.CreateReceiver(entity, new ServiceBusReceiverOptions { SubQueue = subQueue });
        long from = 0;
        while (true)
        {
            var peeked = await peeker.PeekMessagesAsync(100, from);
            if (peeked.Count == 0) break;
            left.AddRange(peeked
                .Where(m => m.MessageId.StartsWith(ownPrefix, StringComparison.Ordinal))
                .Select(m => $"{m.MessageId} ({(subQueue == SubQueue.None ? m.State.ToString() : "dead-lettered")})"));
            from = peeked[^1].SequenceNumber + 1;
        }
    }
    return left.Count == 0 ? null : $"{left.Count} message(s): {string.Join(", ", left.Take(10))}";
}

// Clears what can be received after a failure, so one failure is reported once. Locked messages stay until their
// lock expires.
async Task Purge(string entity)
{
    foreach (var subQueue in new[] { SubQueue.None, SubQueue.DeadLetter })
    {
        await using var purger = client.CreateReceiver(entity, new ServiceBusReceiverOptions
        {
            SubQueue = subQueue,
            ReceiveMode = ServiceBusReceiveMode.ReceiveAndDelete,
        });
        while ((await purger.ReceiveMessagesAsync(100, TimeSpan.FromMilliseconds(500))).Count > 0) { }
    }
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

List<string> Ids(string what, int count) => Enumerable.Range(0, count).Select(k => $"{prefix}{what}-{k}").ToList();

Task SendAll(IEnumerable<string> ids, ServiceBusSender? to = null) =>
    (to ?? sender).SendMessagesAsync(ids.Select(id => new ServiceBusMessage(id) { MessageId = id }));

await Scenario("send with MessageId, peek-lock receive, properties round-trip, complete", async () =>
{
    var sent = new ServiceBusMessage(BinaryData.FromString("hello from .NET"))
    {
        MessageId = $"{prefix}1",
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
});

// The broker once wrote transfers before its attach reply when credit came with the attach (PrefetchCount > 0):
// the client ended the session, losing prefetched messages in receive-and-delete and stranding them under locks in
// peek-lock. Ten messages wait in the queue before each receiver opens, so the first flow finds them.
foreach (var mode in new[] { ServiceBusReceiveMode.PeekLock, ServiceBusReceiveMode.ReceiveAndDelete })
{
    foreach (var prefetch in new[] { 0, 1, 5, 100 })
    {
        var own = $"{queue}-{mode.ToString().ToLowerInvariant()}-{prefetch}";
        await Scenario($"{mode}, PrefetchCount {prefetch}: {iterations} receivers each get the 10 messages waiting at attach ({own})", async () =>
        {
            await using var ownSender = client.CreateSender(own);
            for (var i = 0; i < iterations; i++)
            {
                var ids = Ids($"{mode}-{prefetch}-{i}", 10);
                await SendAll(ids, ownSender);
                await using var r = client.CreateReceiver(own, new ServiceBusReceiverOptions { ReceiveMode = mode, PrefetchCount = prefetch });
                var got = new List<string>();
                var deadline = DateTime.UtcNow.AddSeconds(10);
                while (got.Count < ids.Count && DateTime.UtcNow < deadline)
                {
                    foreach (var m in await r.ReceiveMessagesAsync(ids.Count - got.Count, TimeSpan.FromSeconds(2)))
                    {
                        got.Add(m.MessageId);
                        if (mode == ServiceBusReceiveMode.PeekLock) await r.CompleteMessageAsync(m);
                    }
                }
                Check(got.Order().SequenceEqual(ids.Order()), $"receiver {i + 1}: received {got.Count} of {ids.Count} ({string.Join(",", got.Select(g => g[^1..]))})");
            }
        }, own);
    }
}

await Scenario("ServiceBusProcessor with PrefetchCount 10 and MaxConcurrentCalls 4 processes 40 messages once each", async () =>
{
    var ids = Ids("processor", 40);
    await SendAll(ids);
    var seen = new ConcurrentDictionary<string, int>();
    var errors = new ConcurrentQueue<string>();
    var all = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
    int running = 0, mostAtOnce = 0;
    await using var processor = client.CreateProcessor(queue, new ServiceBusProcessorOptions
    {
        PrefetchCount = 10,
        MaxConcurrentCalls = 4,
        AutoCompleteMessages = true,
    });
    processor.ProcessMessageAsync += async args =>
    {
        var now = Interlocked.Increment(ref running);
        int seenMost;
        while (now > (seenMost = Volatile.Read(ref mostAtOnce)) && Interlocked.CompareExchange(ref mostAtOnce, now, seenMost) != seenMost) { }
        await Task.Delay(20);
        Interlocked.Decrement(ref running);
        seen.AddOrUpdate(args.Message.MessageId, 1, (_, c) => c + 1);
        if (ids.All(seen.ContainsKey)) all.TrySetResult();
    };
    processor.ProcessErrorAsync += args =>
    {
        errors.Enqueue($"{args.ErrorSource}: {args.Exception.Message}");
        return Task.CompletedTask;
    };
    await processor.StartProcessingAsync();
    var finished = await Task.WhenAny(all.Task, Task.Delay(TimeSpan.FromSeconds(30)));
    // Stopping waits for the handlers in flight and their auto-complete.
    await processor.StopProcessingAsync();
    Check(finished == all.Task, $"processed {seen.Count} of {ids.Count}");
    Check(errors.IsEmpty, $"processor errors: {string.Join("; ", errors)}");
    Check(seen.Values.All(c => c == 1), $"processed twice: {string.Join(",", seen.Where(p => p.Value > 1).Select(p => p.Key))}");
    Check(mostAtOnce > 1, $"MaxConcurrentCalls 4 ran at most {mostAtOnce} handler at once");
});

await Scenario("ReceiveMessagesAsync with a 1 s MaxWaitTime on an empty queue returns nothing after the wait, and the link still works", async () =>
{
    await using var r = client.CreateReceiver(queue);
    var clock = Stopwatch.StartNew();
    var none = await r.ReceiveMessagesAsync(10, TimeSpan.FromSeconds(1));
    clock.Stop();
    Check(none.Count == 0, $"received {none.Count}");
    Check(clock.Elapsed >= TimeSpan.FromMilliseconds(900) && clock.Elapsed < TimeSpan.FromSeconds(10), $"returned after {clock.Elapsed.TotalMilliseconds:F0} ms");
    var id = $"{prefix}after-empty";
    await sender.SendMessageAsync(new ServiceBusMessage(id) { MessageId = id });
    var later = await ReceiveOne(r);
    Check(later.MessageId == id, $"MessageId {later.MessageId}");
    await r.CompleteMessageAsync(later);
});

await Scenario("peek shows messages in sequence order without locking them", async () =>
{
    var ids = Ids("peek", 3);
    await SendAll(ids);
    await using var peeker = client.CreateReceiver(queue);
    // Only this scenario's messages: one an earlier failed scenario stranded under a lock is peeked too.
    var peeked = (await peeker.PeekMessagesAsync(100, 0)).Where(m => m.MessageId.StartsWith(prefix, StringComparison.Ordinal)).ToList();
    Check(peeked.Select(m => m.MessageId).SequenceEqual(ids), $"peeked {string.Join(",", peeked.Select(m => m.MessageId))}");
    Check(peeked.Zip(peeked.Skip(1)).All(p => p.First.SequenceNumber < p.Second.SequenceNumber), "sequence numbers ascend");
    Check(peeked.All(m => m.State == ServiceBusMessageState.Active), "peeked messages are active");
    var got = new List<string>();
    while (got.Count < ids.Count)
    {
        var m = await ReceiveOne(receiver);
        got.Add(m.MessageId);
        await receiver.CompleteMessageAsync(m);
    }
    Check(got.SequenceEqual(ids), "a peeked message is received in order, not locked by the peek");
});

await Scenario("defer, then receive the deferred message by sequence number and complete it", async () =>
{
    var id = $"{prefix}defer";
    await sender.SendMessageAsync(new ServiceBusMessage(id) { MessageId = id });
    var first = await ReceiveOne(receiver);
    await receiver.DeferMessageAsync(first);
    var again = await receiver.ReceiveMessageAsync(TimeSpan.FromMilliseconds(500));
    Check(again == null, $"a deferred message was delivered again ({again?.MessageId})");
    var peeked = await receiver.PeekMessageAsync(first.SequenceNumber);
    Check(peeked?.State == ServiceBusMessageState.Deferred, $"peeked state {peeked?.State}");
    var deferred = await receiver.ReceiveDeferredMessageAsync(first.SequenceNumber);
    Check(deferred.MessageId == id && deferred.State == ServiceBusMessageState.Deferred, $"{deferred.MessageId} {deferred.State}");
    // Delivery counts as Service Bus keeps them (.NET counts from 1): 1, deferred, 2, abandoned (still deferred), 3.
    Check(first.DeliveryCount == 1 && deferred.DeliveryCount == 2, $"delivery counts {first.DeliveryCount}, {deferred.DeliveryCount}");
    await receiver.AbandonMessageAsync(deferred);
    var third = await receiver.ReceiveDeferredMessageAsync(first.SequenceNumber);
    Check(third.DeliveryCount == 3, $"after an abandon the deferred message's delivery count is {third.DeliveryCount}");
    await receiver.CompleteMessageAsync(third);
});

await Scenario("a scheduled message is invisible to receivers until its time, then arrives", async () =>
{
    var id = $"{prefix}scheduled";
    var at = DateTimeOffset.UtcNow.AddSeconds(3);
    var seq = await sender.ScheduleMessageAsync(new ServiceBusMessage(id) { MessageId = id }, at);
    var peeked = await receiver.PeekMessageAsync(seq);
    Check(peeked?.State == ServiceBusMessageState.Scheduled, $"peeked state {peeked?.State}");
    Check(Math.Abs((peeked!.ScheduledEnqueueTime - at).TotalSeconds) < 1, $"ScheduledEnqueueTime {peeked.ScheduledEnqueueTime:O}, asked {at:O}");
    var arrived = await ReceiveOne(receiver);
    Check(arrived.MessageId == id, $"MessageId {arrived.MessageId}");
    Check(DateTimeOffset.UtcNow >= at.AddMilliseconds(-50), "delivered before its time");
    await receiver.CompleteMessageAsync(arrived);
});

await Scenario("a cancelled scheduled message never arrives", async () =>
{
    var id = $"{prefix}cancelled";
    var seq = await sender.ScheduleMessageAsync(new ServiceBusMessage(id) { MessageId = id }, DateTimeOffset.UtcNow.AddHours(1));
    Check((await receiver.PeekMessageAsync(seq))?.MessageId == id, "the scheduled message is not visible to peek");
    await sender.CancelScheduledMessageAsync(seq);
    var peeked = await receiver.PeekMessageAsync(seq);
    Check(peeked == null, $"still there after cancel: {peeked?.MessageId} ({peeked?.State})");
});

await Scenario("duplicate MessageId inside the window is dropped", async () =>
{
    var id = $"{prefix}dup";
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
    await sender.SendMessageAsync(new ServiceBusMessage("again") { MessageId = $"{prefix}abandon" });
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
    await sender.SendMessageAsync(new ServiceBusMessage("twice") { MessageId = $"{prefix}lost" });
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
    await sender.SendMessageAsync(new ServiceBusMessage("slow") { MessageId = $"{prefix}renew" });
    var message = await ReceiveOne(receiver);
    var before = message.LockedUntil;
    await Task.Delay(1100);
    await receiver.RenewMessageLockAsync(message);
    Check(message.LockedUntil >= before.AddSeconds(1), $"LockedUntil {before:O} then {message.LockedUntil:O}");
    await receiver.CompleteMessageAsync(message);
});

await Scenario("dead-letter with reason, then read the dead-letter queue", async () =>
{
    await sender.SendMessageAsync(new ServiceBusMessage("poison") { MessageId = $"{prefix}dead" });
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

if (cappedQueue != null)
{
    await Scenario($"a send past MaxSizeInMegabytes fails with QuotaExceeded ({cappedQueue}, 1 MB)", async () =>
    {
        await using var capped = client.CreateSender(cappedQueue);
        var body = new string('x', 200 * 1024);
        var sent = 0;
        ServiceBusException? refused = null;
        while (refused == null && sent < 10)
        {
            try
            {
                await capped.SendMessageAsync(new ServiceBusMessage(body) { MessageId = $"{prefix}cap-{sent}" });
                sent++;
            }
            catch (ServiceBusException e)
            {
                refused = e;
            }
        }
        Check(refused?.Reason == ServiceBusFailureReason.QuotaExceeded, $"after {sent} sends: {refused?.Reason.ToString() ?? "never refused"}");
        Check(sent == 5, $"{sent} messages of 200 KiB fit in 1 MiB");
        await using var drain = client.CreateReceiver(cappedQueue, new ServiceBusReceiverOptions { ReceiveMode = ServiceBusReceiveMode.ReceiveAndDelete });
        var drained = 0;
        while (drained < sent)
        {
            var got = await drain.ReceiveMessagesAsync(sent - drained, TimeSpan.FromSeconds(2));
            Check(got.Count > 0, $"only {drained} of {sent} came back");
            drained += got.Count;
        }
        await capped.SendMessageAsync(new ServiceBusMessage("fits again") { MessageId = $"{prefix}cap-again" });
        Check((await drain.ReceiveMessageAsync(TimeSpan.FromSeconds(2)))?.MessageId == $"{prefix}cap-again", "the send after draining");
    }, cappedQueue);
}

if (topic != null)
{
    // As sbinbox deploys a topic: each service's subscription forwards to the service's own queue, named as it.
    await Scenario($"a topic ({topic}) through forwarding: each subscription forwards to its service's queue (MessageId and properties kept), the queue's locks, delivery counts and dead-letter queue, duplicate detection on the topic, scheduling, a retry on one queue reaching no other", async () =>
    {
        await using var toTopic = client.CreateSender(topic);
        await using var billing = client.CreateReceiver("billing");
        await using var ledger = client.CreateReceiver("ledger");
        await using var billingDead = client.CreateReceiver("billing", new ServiceBusReceiverOptions { SubQueue = SubQueue.DeadLetter });
        var both = $"{prefix}both";
        var event1 = new ServiceBusMessage(both) { MessageId = both, Subject = "Credit", CorrelationId = $"{prefix}corr" };
        event1.ApplicationProperties["tenant"] = "t1";
        await toTopic.SendMessageAsync(event1);
        await toTopic.SendMessageAsync(new ServiceBusMessage(both) { MessageId = both }); // a resend: dropped at the topic

        // The subscription forwards: no receiver may take from it, as on Service Bus. The broker refuses the link
        // (the JavaScript SDK reports it, test/integration/broker-forwarding.test.ts); the .NET SDK's receive
        // returns nothing within its wait instead of throwing. Nothing is also what an accepted receiver would get
        // (the events are forwarded before it attaches), so the refusal itself is checked by the broker's record
        // in scripts/dotnet-client-check.ts; here only that the client gets no message and no other error.
        await using (var fromSubscription = client.CreateReceiver(topic, "billing"))
        {
            ServiceBusReceivedMessage? taken = null;
            try
            {
                taken = await fromSubscription.ReceiveMessageAsync(TimeSpan.FromSeconds(1));
            }
            catch (Exception e) when (e.Message.Contains("auto-forwarding enabled"))
            {
            }
            Check(taken == null, $"a receiver on the forwarding subscription got {taken?.MessageId}");
        }

        var first = await ReceiveOne(billing);
        Check(first.MessageId == both && first.DeliveryCount == 1, $"billing first {first.MessageId} ({first.DeliveryCount})");
        Check(first.Subject == "Credit" && first.CorrelationId == $"{prefix}corr" && (string)first.ApplicationProperties["tenant"] == "t1", "properties kept through forwarding");
        var before = first.LockedUntil;
        await Task.Delay(50);
        await billing.RenewMessageLockAsync(first);
        Check(first.LockedUntil > before, "renew-lock on the service's queue extends LockedUntil");
        await billing.AbandonMessageAsync(first);
        var again = await ReceiveOne(billing);
        Check(again.MessageId == both && again.DeliveryCount == 2, $"billing again {again.MessageId} ({again.DeliveryCount})");
        await billing.CompleteMessageAsync(again);

        // billing's retry: a copy scheduled on its own queue, which ledger's queue never sees.
        var retry = $"{prefix}billing-retry";
        await using (var toBilling = client.CreateSender("billing"))
            await toBilling.ScheduleMessageAsync(new ServiceBusMessage(retry) { MessageId = retry }, DateTimeOffset.UtcNow.AddSeconds(1));
        var retried = await ReceiveOne(billing);
        Check(retried.MessageId == retry, $"billing's retry {retried.MessageId}");
        await billing.DeadLetterMessageAsync(retried, "DotnetReason", "on the service's queue");
        var dead = await ReceiveOne(billingDead);
        Check(dead.MessageId == retry && dead.DeadLetterSource == "billing", $"dead {dead.MessageId} from {dead.DeadLetterSource}");
        await billingDead.CompleteMessageAsync(dead);

        var ledgerCopy = await ReceiveOne(ledger);
        Check(ledgerCopy.MessageId == both && ledgerCopy.DeliveryCount == 1, $"ledger {ledgerCopy.MessageId} ({ledgerCopy.DeliveryCount}): its own delivery count");
        await ledger.CompleteMessageAsync(ledgerCopy);
        var nothing = await ledger.ReceiveMessageAsync(TimeSpan.FromSeconds(1));
        Check(nothing == null, $"ledger got {nothing?.MessageId}: the resend or billing's retry");

        var later = $"{prefix}scheduled";
        await toTopic.ScheduleMessageAsync(new ServiceBusMessage(later) { MessageId = later }, DateTimeOffset.UtcNow.AddSeconds(1));
        foreach (var receiverOf in new[] { billing, ledger })
        {
            var due = await ReceiveOne(receiverOf);
            Check(due.MessageId == later, $"scheduled {due.MessageId}");
            await receiverOf.CompleteMessageAsync(due);
        }
        var ledgerLeft = await Leftovers("ledger", prefix);
        Check(ledgerLeft == null, $"left in ledger: {ledgerLeft}");
    }, "billing");
}

if (topic != null)
{
    await Scenario($"rule management over AMQP: ServiceBusRuleManager lists {topic}/ledger's rules, adds one, refuses it twice, deletes it", async () =>
    {
        await using var rules = client.CreateRuleManager(topic, "ledger");
        async Task<List<string>> Names()
        {
            var names = new List<string>();
            await foreach (var rule in rules.GetRulesAsync()) names.Add(rule.Name);
            return names;
        }
        var before = await Names();
        Check(before.Count > 0, "the subscription has its rules");
        var name = $"dotnet-{run}";
        await rules.CreateRuleAsync(name, new Azure.Messaging.ServiceBus.Administration.SqlRuleFilter("tenant = 'nobody'"));
        var during = await Names();
        Check(during.SequenceEqual(before.Append(name)), $"rules after the add: {string.Join(", ", during)}");
        await foreach (var rule in rules.GetRulesAsync())
            if (rule.Name == name)
                Check(rule.Filter is Azure.Messaging.ServiceBus.Administration.SqlRuleFilter sql && sql.SqlExpression == "tenant = 'nobody'", $"the added rule's filter {rule.Filter}");
        try
        {
            await rules.CreateRuleAsync(name, new Azure.Messaging.ServiceBus.Administration.SqlRuleFilter("1=1"));
            Check(false, "a second rule of the same name was taken");
        }
        catch (ServiceBusException e) when (e.Reason == ServiceBusFailureReason.MessagingEntityAlreadyExists)
        {
        }
        await rules.DeleteRuleAsync(name);
        var after = await Names();
        Check(after.SequenceEqual(before), $"rules after the delete: {string.Join(", ", after)}");
    }, "billing");
}

var sessionQueue = args.Length > 4 && args[4] != "" ? args[4] : null;
if (sessionQueue != null)
    await SessionScenarios.Run(connectionString, client, sessionQueue, (name, body, on) => Scenario(name, body, on), () => prefix);

Console.WriteLine(failures == 0 ? "all scenarios passed" : $"{failures} scenario(s) failed");
return failures == 0 ? 0 : 1;
