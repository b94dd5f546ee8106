/// How long a fetched key document stays fresh (RFC 9111 §4.2.1, reduced to
/// what key hosts send): `Cache-Control: max-age` minus `Age`, else `Expires`
/// minus now, else the configured default; then clamped to [floor, ceiling].
/// `no-store` / `no-cache` count as 0, so the floor applies.
enum CacheLifetime {
    static func ttl(cacheControl: String?, age: String?, expires: String?, now: Double,
                    configuration: KeyManagerConfiguration) -> Double {
        var seconds: Double
        if let maxAge = maxAge(cacheControl) {
            seconds = maxAge - (age.flatMap { Double($0.trimmingSpaces) }.map { max(0, $0) } ?? 0)
        } else if let expires, let at = httpDate(expires) {
            seconds = at - now
        } else {
            seconds = configuration.defaultTTL
        }
        return min(max(seconds, configuration.minimumTTL), configuration.maximumTTL)
    }

    /// The `max-age` directive in seconds; 0 for `no-store` / `no-cache`; nil when absent.
    static func maxAge(_ cacheControl: String?) -> Double? {
        guard let cacheControl else { return nil }
        var result: Double?
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1)
            let name = parts[0].trimmingSpaces.lowercased()
            switch name {
            case "no-store", "no-cache":
                return 0
            case "max-age":
                guard parts.count == 2 else { continue }
                var value = parts[1].trimmingSpaces
                if value.hasPrefix("\"") && value.hasSuffix("\"") && value.count >= 2 { value = String(value.dropFirst().dropLast()) }
                if let n = Int(value), n >= 0 { result = Double(n) }
            default:
                continue
            }
        }
        return result
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 §5.6.7) as
    /// epoch seconds; other date forms give nil (the default TTL then applies).
    static func httpDate(_ text: String) -> Double? {
        let parts = text.trimmingSpaces.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", parts[0].hasSuffix(","),
              let day = Int(parts[1]), let year = Int(parts[3]),
              let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
                .firstIndex(of: String(parts[2])) else { return nil }
        let time = parts[4].split(separator: ":")
        guard time.count == 3, let h = Int(time[0]), let m = Int(time[1]), let s = Int(time[2]),
              (1...31).contains(day), (0...23).contains(h), (0...59).contains(m), (0...60).contains(s) else { return nil }
        return Double(daysFromCivil(year: year, month: month + 1, day: day) * 86_400 + h * 3600 + m * 60 + s)
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}

extension StringProtocol {
    var trimmingSpaces: String {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}
