/// A request method. Methods are case-sensitive (RFC 9110 §9.1): `get` is a valid token but `.other`.
/// For `.other` the raw bytes are at ``RequestHead/methodRange``.
public enum HTTPMethod: Sendable, Equatable {
    case get, head, post, put, delete, options, patch, trace, connect, other

    /// Recognises a method token already validated as a `token`.
    public static func recognise(_ p: UnsafeRawBufferPointer, _ r: Range<Int>) -> HTTPMethod {
        @inline(__always) func eq(_ s: StaticString) -> Bool {
            guard s.utf8CodeUnitCount == r.count else { return false }
            let q = s.utf8Start
            for k in 0..<r.count where p[r.lowerBound + k] != q[k] { return false }
            return true
        }
        switch r.count {
        case 3: return eq("GET") ? .get : eq("PUT") ? .put : .other
        case 4: return eq("POST") ? .post : eq("HEAD") ? .head : .other
        case 5: return eq("PATCH") ? .patch : eq("TRACE") ? .trace : .other
        case 6: return eq("DELETE") ? .delete : .other
        case 7: return eq("OPTIONS") ? .options : eq("CONNECT") ? .connect : .other
        default: return .other
        }
    }
}
