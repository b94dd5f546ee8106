/// The one rule of a refresh: what presenting the refresh token of `presented` does to a
/// session as `record` holds it, at `now`. Both stores apply it (the embedded one on its
/// queue, the Redis one between a read and a compare-and-set of the counter), so it is
/// written once.
///
/// - past the session's lifetime or idle timeout: `expired` (the session ends);
/// - the current token (or one ahead of a rotation lost in a crash: its MAC proved it the
///   gateway's): `rotate` to `presented + 1`;
/// - the previous token within `grace` of the last rotation: `current` (the racing refresh
///   of one app gets the pair the winner got);
/// - any other token: `reused` (the session ends: a copy of a spent token is in someone
///   else's hands).
public enum Rotation {
    public enum Decision: Sendable, Equatable { case rotate, current, reused, expired }

    public static func decide(_ record: SessionRecord, presented: UInt64, now: Int64, grace: Int64,
                              idleTimeout: Int64) -> Decision {
        if now >= record.expiresAt || now - record.lastUsedAt > idleTimeout { return .expired }
        if presented >= record.counter { return .rotate }
        if presented + 1 == record.counter && now - record.rotatedAt <= grace { return .current }
        return .reused
    }
}
