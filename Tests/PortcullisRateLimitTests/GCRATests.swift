import Dispatch
import Testing
@testable import PortcullisRateLimit

@Suite struct GCRATests {
    /// 10 per second, bursts of 3: an interval of 100 ms.
    let gcra = GCRA(count: 10, periodMicroseconds: 1_000_000, burst: 3)

    @Test func anIdleKeySendsItsBurstAtOnceThenIsRefusedUntilAnIntervalPasses() {
        var tat: Int64?
        let now: Int64 = 5_000_000
        var remaining: [Int64] = []
        for _ in 0..<3 {
            let decision = gcra.decide(tat: tat, now: now)
            #expect(decision.allowed)
            remaining.append(decision.remaining)
            tat = decision.tat
        }
        #expect(remaining == [2, 1, 0])
        let refused = gcra.decide(tat: tat, now: now)
        #expect(!refused.allowed)
        #expect(refused.retryAfterMicroseconds == 100_000)
        #expect(refused.resetMicroseconds == 300_000)
        // A refusal changes nothing: refused again and again, the wait does not grow.
        let again = gcra.decide(tat: refused.tat, now: now + 50_000)
        #expect(!again.allowed && again.retryAfterMicroseconds == 50_000)
        // One interval later, exactly one more.
        let later = gcra.decide(tat: tat, now: now + 100_000)
        #expect(later.allowed && later.remaining == 0)
        #expect(!gcra.decide(tat: later.tat, now: now + 100_000).allowed)
    }

    @Test func theSustainedRateIsTheConfiguredRate() {
        // 1,000 requests spread over 10 s at 200 per second: exactly the burst plus 10 per second pass.
        var tat: Int64?
        var allowed = 0
        for i in 0..<2_000 {
            let now = Int64(i) * 5_000
            let decision = gcra.decide(tat: tat, now: now)
            if decision.allowed { allowed += 1; tat = decision.tat }
        }
        #expect(allowed == 3 + 99 || allowed == 3 + 100)
    }

    @Test func anIdleKeyIsWholeAgainAfterItsResetAndExpires() {
        let first = gcra.decide(tat: nil, now: 0)
        #expect(first.resetMicroseconds == 100_000)
        #expect(gcra.expiry(ofTAT: first.tat, now: 0) == 100_000)
        #expect(gcra.expiry(ofTAT: first.tat, now: 200_000) == 0)
        let whole = gcra.decide(tat: first.tat, now: 200_000)
        #expect(whole.remaining == 2)
    }

    @Test func ratesParseInEveryUnitAndRefuseWhatIsNotARate() {
        #expect(RateLimitSettings.parseRate("10/s")! == (10, 1))
        #expect(RateLimitSettings.parseRate("600/m")! == (600, 60))
        #expect(RateLimitSettings.parseRate("100 / 10s")! == (100, 10))
        #expect(RateLimitSettings.parseRate("5/hour")! == (5, 3600))
        #expect(RateLimitSettings.parseRate("1000/d")! == (1000, 86_400))
        for bad in ["", "10", "10/", "/s", "0/s", "-1/s", "10/x", "10/0s", "ten/s", "10/s/s", "1.5/s"] {
            #expect(RateLimitSettings.parseRate(bad) == nil, "\(bad)")
        }
    }

    @Test func headersFollowTheIETFDraft() {
        let rule = RateLimitRule(name: "per-user", routes: nil, key: .user, count: 10, periodSeconds: 1, burst: 20)
        #expect(rule.policyHeader == "\"per-user\";q=20;w=2")
        let decision = rule.gcra.decide(tat: nil, now: 0)
        #expect(rule.limitHeader(decision) == "\"per-user\";r=19;t=1")
        #expect(RateLimitRule.seconds(rounding: 0) == 0)
        #expect(RateLimitRule.seconds(rounding: 1) == 1)
        #expect(RateLimitRule.seconds(rounding: 1_000_000) == 1)
        #expect(RateLimitRule.seconds(rounding: 1_000_001) == 2)
    }
}

@Suite struct EmbeddedRateLimitStoreTests {
    let rule = RateLimitRule(name: "r", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 2)

    @Test func keysRulesAndAddressesEachHaveTheirOwnBudget() {
        let store = EmbeddedRateLimitStore()
        let other = RateLimitRule(name: "other", routes: nil, key: .user, count: 1, periodSeconds: 60, burst: 2)
        let alice = RateLimitKey(identity: "alice")
        for _ in 0..<2 { #expect(store.decide(rule: rule, key: alice, now: 0).allowed) }
        #expect(!store.decide(rule: rule, key: alice, now: 0).allowed)
        #expect(store.decide(rule: rule, key: RateLimitKey(identity: "bob"), now: 0).allowed)
        #expect(store.decide(rule: other, key: alice, now: 0).allowed)
        // A user id spelled like an address is not that address.
        let named = RateLimitKey(identity: "127.0.0.1"), address = RateLimitKey(address: "127.0.0.1")
        for _ in 0..<2 { #expect(store.decide(rule: rule, key: named, now: 0).allowed) }
        #expect(store.decide(rule: rule, key: address, now: 0).allowed)
        #expect(store.counts()["r"] == EmbeddedRateLimitStore.Counts(allowed: 6, limited: 1))
        #expect(store.counts()["other"] == EmbeddedRateLimitStore.Counts(allowed: 1, limited: 0))
    }

    @Test func concurrentCallersNeverShareOutMoreThanTheBurst() {
        let store = EmbeddedRateLimitStore()
        let wide = RateLimitRule(name: "wide", routes: nil, key: .user, count: 1, periodSeconds: 3600, burst: 500)
        let key = RateLimitKey(identity: "shared")
        let allowed = LockedCounter()
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<1_000 where store.decide(rule: wide, key: key, now: 1).allowed { allowed.add() }
        }
        #expect(allowed.value == 500)
        #expect(store.counts()["wide"] == EmbeddedRateLimitStore.Counts(allowed: 500, limited: 3_500))
    }

    @Test func theTableIsBoundedForgettingIdleKeysFirst() {
        let store = EmbeddedRateLimitStore(maxKeys: 16 * 8)
        // Idle keys (their TAT passed) are swept: no active key is forgotten.
        for i in 0..<2_000 {
            _ = store.decide(rule: rule, key: RateLimitKey(address: "10.0.\(i / 256).\(i % 256)"), now: Int64(i) * 120_000_000)
        }
        #expect(store.keyCount <= 16 * 8)
        #expect(store.evictions == 0)
        // All active at once: the bound holds and the forgetting is counted.
        for i in 0..<2_000 {
            _ = store.decide(rule: rule, key: RateLimitKey(address: "10.1.\(i / 256).\(i % 256)"), now: 1_000_000_000_000)
        }
        #expect(store.keyCount <= 16 * 8)
        #expect(store.evictions > 0)
    }
}

final class LockedCounter: @unchecked Sendable {
    private let lock = DispatchSemaphore(value: 1)
    private var count = 0
    func add() { lock.wait(); count += 1; lock.signal() }
    var value: Int { lock.wait(); defer { lock.signal() }; return count }
}
