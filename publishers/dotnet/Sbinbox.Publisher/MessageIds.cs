using System.Security.Cryptography;
using System.Text;

namespace Sbinbox.Publisher;

/// <summary>
/// The MessageId of an event, exactly as every sbinbox publisher derives it (docs/publisher.md): UUID version 5
/// (RFC 9562, SHA-1) of the UTF-8 name <c>type:key</c> in the sbinbox namespace, lower-case 8-4-4-4-12.
/// </summary>
public static class MessageIds
{
    /// <summary>The sbinbox namespace: fixed forever, since changing it would change every id.</summary>
    public const string Namespace = "f5dfdc27-9e31-4822-becc-050e35acb0fa";

    private static readonly byte[] NamespaceBytes = Convert.FromHexString(Namespace.Replace("-", ""));

    // Throws on a lone surrogate instead of writing U+FFFD: such a name has no UTF-8 encoding, so no id.
    private static readonly UTF8Encoding StrictUtf8 = new(encoderShouldEmitUTF8Identifier: false, throwOnInvalidBytes: true);

    /// <summary>The MessageId of an event: the same for every retry and every process (in any language) that sends it.</summary>
    /// <exception cref="ArgumentException">An empty type or key, a ':' in the type, or a lone surrogate in either.</exception>
    public static string Derive(string type, string key) => UuidV5(NamespaceBytes, CanonicalName(type, key));

    /// <summary>UUID version 5 of <paramref name="name"/> (as UTF-8) in the namespace given as a UUID string.</summary>
    public static string UuidV5(string name, string @namespace)
    {
        if (!Guid.TryParseExact(@namespace, "D", out _))
            throw new ArgumentException($"namespace \"{@namespace}\" is not a UUID", nameof(@namespace));
        return UuidV5(Convert.FromHexString(@namespace.Replace("-", "")), Utf8(name, "name"));
    }

    /// <summary>
    /// The name's UTF-8: <c>type:key</c> taken exactly as given (no trimming, case folding or normalisation). The type
    /// must not contain ':' so that the split is unambiguous; the key may.
    /// </summary>
    public static byte[] CanonicalName(string type, string key)
    {
        ArgumentNullException.ThrowIfNull(type);
        ArgumentNullException.ThrowIfNull(key);
        if (type.Length == 0) throw new ArgumentException("event type must not be empty", nameof(type));
        if (type.Contains(':')) throw new ArgumentException($"event type \"{type}\" must not contain \":\"", nameof(type));
        if (key.Length == 0) throw new ArgumentException("business key must not be empty", nameof(key));
        Utf8(type, "event type");
        return Utf8($"{type}:{key}", "business key");
    }

    private static byte[] Utf8(string text, string what)
    {
        try
        {
            return StrictUtf8.GetBytes(text);
        }
        catch (EncoderFallbackException)
        {
            throw new ArgumentException($"{what} has a lone surrogate (not valid Unicode text, no UTF-8 encoding)");
        }
    }

    /// <summary>
    /// SHA-1 of the namespace's 16 bytes in network order followed by the name; the first 16 bytes of the digest with
    /// the version nibble set to 5 and the variant bits to 10, formatted byte by byte in that order (not through
    /// <c>new Guid(bytes)</c>, which reads the first three groups little-endian).
    /// </summary>
    private static string UuidV5(byte[] @namespace, byte[] name)
    {
        var data = new byte[@namespace.Length + name.Length];
        @namespace.CopyTo(data, 0);
        name.CopyTo(data, @namespace.Length);
        var hash = SHA1.HashData(data);
        hash[6] = (byte)((hash[6] & 0x0F) | 0x50);
        hash[8] = (byte)((hash[8] & 0x3F) | 0x80);
        var hex = Convert.ToHexString(hash, 0, 16).ToLowerInvariant();
        return $"{hex[..8]}-{hex[8..12]}-{hex[12..16]}-{hex[16..20]}-{hex[20..32]}";
    }
}
