// Session scenarios for the .NET SDK: the session receiver (AcceptSessionAsync / AcceptNextSessionAsync, order,
// abandon to the session's head, lock renewal, session state, peek per session, refusals) and the
// ServiceBusSessionProcessor (several sessions at once, each in order). Run from Program.cs on a session queue of
// their own (RequiresSession true, empty): sessionQueue for the receiver, sessionQueue + "-processor" for the processor.
using System.Collections.Concurrent;
using Azure.Messaging.ServiceBus;

static class SessionScenarios
{
    public static async Task Run(
        string connectionString,
        ServiceBusClient client,
        string sessionQueue,
        Func<string, Func<Task>, string?, Task> scenario,
        Func<string> prefix)
    {
        static void Check(bool condition, string what)
        {
            if (!condition) throw new InvalidOperationException(what);
        }
        ServiceBusMessage InSession(string session, string id) => new(id) { MessageId = id, SessionId = session };

        await scenario($"sessions ({sessionQueue}): a send without SessionId is refused with InvalidOperationException", async () =>
        {
            await using var sender = client.CreateSender(sessionQueue);
            try
            {
                await sender.SendMessageAsync(new ServiceBusMessage("x") { MessageId = $"{prefix()}no-session" });
                throw new InvalidOperationException("the send was accepted");
            }
            catch (InvalidOperationException e) when (e.Message.Contains("SessionId was not set", StringComparison.Ordinal))
            {
            }
        }, sessionQueue);

        await scenario($"sessions ({sessionQueue}): AcceptSessionAsync gets its session in order; abandon returns to the head; renew, state, peek; a second accept is refused", async () =>
        {
            var p = prefix();
            string a = $"{p}a", b = $"{p}b";
            await using var sender = client.CreateSender(sessionQueue);
            await sender.SendMessagesAsync(new[]
            {
                InSession(a, $"{p}a-0"), InSession(b, $"{p}b-0"), InSession(a, $"{p}a-1"), InSession(a, $"{p}a-2"),
            });
            await using var session = await client.AcceptSessionAsync(sessionQueue, a);
            Check(session.SessionId == a, $"SessionId {session.SessionId}");
            Check(session.SessionLockedUntil > DateTimeOffset.UtcNow.AddSeconds(20), $"SessionLockedUntil {session.SessionLockedUntil}");
            try
            {
                await using var second = await client.AcceptSessionAsync(sessionQueue, a);
                throw new InvalidOperationException("a second receiver accepted the held session");
            }
            catch (ServiceBusException e) when (e.Reason == ServiceBusFailureReason.SessionCannotBeLocked)
            {
            }
            var peeked = await session.PeekMessagesAsync(10);
            Check(peeked.Select(m => m.MessageId).SequenceEqual(new[] { $"{p}a-0", $"{p}a-1", $"{p}a-2" }),
                $"peek saw {string.Join(",", peeked.Select(m => m.MessageId))}");
            var first = await session.ReceiveMessageAsync(TimeSpan.FromSeconds(5));
            Check(first?.MessageId == $"{p}a-0" && first.SessionId == a, $"first {first?.MessageId}");
            await session.AbandonMessageAsync(first!);
            var got = new List<ServiceBusReceivedMessage>();
            while (got.Count < 3)
            {
                var batch = await session.ReceiveMessagesAsync(3 - got.Count, TimeSpan.FromSeconds(2));
                if (batch.Count == 0) break;
                got.AddRange(batch);
            }
            Check(got.Select(m => m.MessageId).SequenceEqual(new[] { $"{p}a-0", $"{p}a-1", $"{p}a-2" }),
                $"after abandon {string.Join(",", got.Select(m => m.MessageId))}");
            Check(got[0].DeliveryCount == 2, $"the abandoned head's DeliveryCount {got[0].DeliveryCount}");
            var before = session.SessionLockedUntil;
            await Task.Delay(50);
            await session.RenewSessionLockAsync();
            Check(session.SessionLockedUntil > before, $"renewed {session.SessionLockedUntil} after {before}");
            Check(await session.GetSessionStateAsync() == null, "no state at first");
            await session.SetSessionStateAsync(BinaryData.FromString("applied:2"));
            Check((await session.GetSessionStateAsync())?.ToString() == "applied:2", "state read back");
            foreach (var m in got) await session.CompleteMessageAsync(m);
            await session.SetSessionStateAsync(null);
            Check(await session.GetSessionStateAsync() == null, "state cleared");

            await using var other = await client.AcceptNextSessionAsync(sessionQueue);
            Check(other.SessionId == b, $"next session {other.SessionId}");
            var bMessage = await other.ReceiveMessageAsync(TimeSpan.FromSeconds(5));
            Check(bMessage?.MessageId == $"{p}b-0", $"b got {bMessage?.MessageId}");
            await other.CompleteMessageAsync(bMessage!);
        }, sessionQueue);

        await scenario($"sessions ({sessionQueue}): AcceptNextSessionAsync with no session available fails with ServiceTimeout after TryTimeout", async () =>
        {
            await using var shortClient = new ServiceBusClient(connectionString, new ServiceBusClientOptions
            {
                RetryOptions = new ServiceBusRetryOptions { MaxRetries = 0, TryTimeout = TimeSpan.FromSeconds(2) },
            });
            var started = DateTime.UtcNow;
            try
            {
                await using var none = await shortClient.AcceptNextSessionAsync(sessionQueue);
                throw new InvalidOperationException($"accepted session {none.SessionId}");
            }
            catch (ServiceBusException e) when (e.Reason == ServiceBusFailureReason.ServiceTimeout)
            {
            }
            var waited = DateTime.UtcNow - started;
            Check(waited >= TimeSpan.FromSeconds(1.5), $"returned after {waited.TotalMilliseconds} ms");
        }, sessionQueue);

        var processorQueue = $"{sessionQueue}-processor";
        await scenario($"ServiceBusSessionProcessor ({processorQueue}): MaxConcurrentSessions 3 over 6 sessions of 8 messages, each session in order, each message once", async () =>
        {
            var p = prefix();
            var sessions = Enumerable.Range(0, 6).Select(s => $"{p}s{s}").ToList();
            await using var sender = client.CreateSender(processorQueue);
            var all = new List<ServiceBusMessage>();
            for (var k = 0; k < 8; k++)
                foreach (var s in sessions) all.Add(InSession(s, $"{s}-{k}"));
            await sender.SendMessagesAsync(all);
            var seen = new ConcurrentDictionary<string, ConcurrentQueue<string>>();
            var errors = new ConcurrentQueue<string>();
            int running = 0, mostAtOnce = 0, count = 0;
            var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            await using var processor = client.CreateSessionProcessor(processorQueue, new ServiceBusSessionProcessorOptions
            {
                MaxConcurrentSessions = 3,
                MaxConcurrentCallsPerSession = 1,
                AutoCompleteMessages = true,
                SessionIdleTimeout = TimeSpan.FromSeconds(1),
            });
            var active = new ConcurrentDictionary<string, int>();
            processor.ProcessMessageAsync += async args =>
            {
                if (active.AddOrUpdate(args.SessionId, 1, (_, v) => v + 1) > 1) errors.Enqueue($"two at once in {args.SessionId}");
                var now = Interlocked.Increment(ref running);
                int most;
                do { most = mostAtOnce; } while (now > most && Interlocked.CompareExchange(ref mostAtOnce, now, most) != most);
                await Task.Delay(10);
                seen.GetOrAdd(args.SessionId, _ => new ConcurrentQueue<string>()).Enqueue(args.Message.MessageId);
                Interlocked.Decrement(ref running);
                active.AddOrUpdate(args.SessionId, 0, (_, v) => v - 1);
                if (Interlocked.Increment(ref count) == all.Count) done.TrySetResult();
            };
            processor.ProcessErrorAsync += args =>
            {
                errors.Enqueue($"{args.ErrorSource}: {args.Exception.Message}");
                return Task.CompletedTask;
            };
            await processor.StartProcessingAsync();
            await Task.WhenAny(done.Task, Task.Delay(TimeSpan.FromSeconds(40)));
            await processor.StopProcessingAsync();
            Check(done.Task.IsCompleted, $"processed {count} of {all.Count}");
            foreach (var s in sessions)
            {
                var order = seen.TryGetValue(s, out var q) ? q.ToList() : new List<string>();
                var expected = Enumerable.Range(0, 8).Select(k => $"{s}-{k}").ToList();
                Check(order.SequenceEqual(expected), $"{s} in order: {string.Join(",", order.Select(o => o[^1..]))}");
            }
            Check(mostAtOnce <= 3, $"{mostAtOnce} handlers at once with MaxConcurrentSessions 3");
            Check(errors.IsEmpty, $"errors: {string.Join("; ", errors.Take(3))}");
        }, processorQueue);
    }
}
