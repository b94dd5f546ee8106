#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A parsed JSON text: its bytes plus tokens. Lookups scan an object's members
/// (claim sets are small) and compare names byte-wise without allocating.
///
/// One allocation holds everything: the tokens, then the bytes, in the tail
/// of this object (a `ManagedBuffer`). A class: the claim checks pass it
/// around, and one reference is cheaper than copying two arrays each time.
/// Immutable once built.
final class JSONDocument: ManagedBuffer<JSONDocument.Counts, JSONToken>, @unchecked Sendable {
    // @unchecked Sendable: the tail storage is written only by `make`, before
    // the document is returned to anyone; afterwards it is only read.

    struct Counts {
        let tokens: Int
        let bytes: Int
    }

    /// Copies `tokens` and `bytes` into a new document.
    static func make(tokens: UnsafeBufferPointer<JSONToken>, bytes: UnsafeBufferPointer<UInt8>) -> JSONDocument {
        let stride = MemoryLayout<JSONToken>.stride
        let byteSlots = (bytes.count + stride - 1) / stride
        let buffer = JSONDocument.create(minimumCapacity: tokens.count + byteSlots) { _ in
            Counts(tokens: tokens.count, bytes: bytes.count)
        }
        let document = unsafeDowncast(buffer, to: JSONDocument.self)
        document.withUnsafeMutablePointerToElements { elements in
            if let source = tokens.baseAddress { elements.initialize(from: source, count: tokens.count) }
            let byteStorage = UnsafeMutableRawPointer(elements + tokens.count).bindMemory(to: UInt8.self, capacity: bytes.count)
            if let source = bytes.baseAddress { byteStorage.initialize(from: source, count: bytes.count) }
        }
        return document
    }

    /// Parses a whole byte array whose root must be an object.
    static func parsingObject(_ bytes: [UInt8]) throws(JSONError) -> JSONDocument {
        try bytes.withUnsafeBufferPointer { buffer throws(JSONError) in
            try withTokenStorage(bound: JSONParser.tokenBound(byteCount: buffer.count)) { tokens throws(JSONError) in
                var count = 0
                _ = try parseObject(buffer, range: 0..<buffer.count, tokens: tokens, count: &count)
                return make(tokens: UnsafeBufferPointer(rebasing: tokens[0..<count]), bytes: buffer)
            }
        }
    }

    /// Tokens that fit the stack buffer `withTokenStorage` tries first:
    /// 1 KiB, which `withUnsafeTemporaryAllocation` always places on the
    /// stack (larger requests may go to the heap). JWT headers and claim
    /// sets of ordinary tokens need 10-50.
    static let stackTokenCapacity = 1024 / MemoryLayout<JSONToken>.stride

    /// Runs `body` with temporary token storage: first a small stack buffer;
    /// if `body` runs out of room there (`.tooLarge`) and `bound` (the most
    /// tokens the text can hold) is larger, again with room for
    /// `min(bound, JSONParser.defaultMaxTokens)`. `body` must be repeatable.
    static func withTokenStorage<R>(bound: Int, _ body: (UnsafeMutableBufferPointer<JSONToken>) throws(JSONError) -> R) throws(JSONError) -> R {
        let small = min(bound, stackTokenCapacity)
        let first = withUnsafeTemporaryAllocation(of: JSONToken.self, capacity: small) { tokens -> Result<R, JSONError> in
            do throws(JSONError) { return .success(try body(tokens)) } catch { return .failure(error) }
        }
        switch first {
        case .success(let value): return value
        case .failure(.tooLarge) where bound > small && small < JSONParser.defaultMaxTokens:
            let capacity = min(bound, JSONParser.defaultMaxTokens)
            return try withUnsafeTemporaryAllocation(of: JSONToken.self, capacity: capacity) { tokens throws(JSONError) in try body(tokens) }
        case .failure(let error): throw error
        }
    }

    /// Parses `bytes[range]` into `tokens[count...]`, requiring the root to
    /// be an object; returns the root token index.
    static func parseObject(_ bytes: UnsafeBufferPointer<UInt8>, range: Range<Int>, tokens: UnsafeMutableBufferPointer<JSONToken>,
                            count: inout Int) throws(JSONError) -> Int {
        let root = try JSONParser.parse(bytes, range: range, tokens: tokens, count: &count)
        guard tokens[root].kind == .object else { throw .notAnObject }
        return root
    }

    var tokenCount: Int { withUnsafeMutablePointerToHeader { $0.pointee.tokens } }
    var byteCount: Int { withUnsafeMutablePointerToHeader { $0.pointee.bytes } }

    // Every access goes through `withUnsafeMutablePointers`: reading the
    // `header` property instead would be a class property access with a
    // dynamic exclusivity check on each token lookup.

    /// Calls `body` with the tokens (valid only inside `body`).
    @inline(__always)
    func withTokens<R>(_ body: (UnsafeBufferPointer<JSONToken>) throws -> R) rethrows -> R {
        try withUnsafeMutablePointers { header, elements in try body(UnsafeBufferPointer(start: elements, count: header.pointee.tokens)) }
    }

    /// Calls `body` with the text's bytes (valid only inside `body`).
    @inline(__always)
    func withBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withUnsafeMutablePointers { header, elements in
            let counts = header.pointee
            let bytes = UnsafeRawPointer(elements + counts.tokens).assumingMemoryBound(to: UInt8.self)
            return try body(UnsafeBufferPointer(start: bytes, count: counts.bytes))
        }
    }

    /// Calls `body` with both.
    @inline(__always)
    func withTokensAndBytes<R>(_ body: (UnsafeBufferPointer<JSONToken>, UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withUnsafeMutablePointers { header, elements in
            let counts = header.pointee
            let bytes = UnsafeRawPointer(elements + counts.tokens).assumingMemoryBound(to: UInt8.self)
            return try body(UnsafeBufferPointer(start: elements, count: counts.tokens), UnsafeBufferPointer(start: bytes, count: counts.bytes))
        }
    }

    /// The bytes of `start..<end` (offsets into the text).
    func bytes(_ start: Int, _ end: Int) -> [UInt8] { withBytes { Array($0[start..<end]) } }

    subscript(_ index: Int) -> JSONToken {
        withUnsafeMutablePointers { header, elements in
            precondition(index >= 0 && index < header.pointee.tokens, "JSON token index out of range")
            return elements[index]
        }
    }

    func string(_ index: Int) -> String? {
        let token = self[index]
        guard token.kind == .string else { return nil }
        return withBytes { bytes in
            if !token.flag { return String(decoding: bytes[Int(token.start)..<Int(token.end)], as: UTF8.self) }
            return String(decoding: JSONDocumentBytes.unescapedBytes(bytes, token), as: UTF8.self)
        }
    }

    func stringBytes(_ index: Int) -> [UInt8]? {
        let token = self[index]
        guard token.kind == .string else { return nil }
        return withBytes { JSONDocumentBytes.unescapedBytes($0, token) }
    }

    func number(_ index: Int) -> Double? {
        let token = self[index]
        guard token.kind == .number else { return nil }
        return withBytes { JSONDocumentBytes.number($0, token) }
    }

    func bool(_ index: Int) -> Bool? {
        let token = self[index]
        return token.kind == .bool ? token.flag : nil
    }

    /// Whether the string token equals `other` (UTF-8).
    func stringEquals(_ index: Int, _ other: [UInt8]) -> Bool {
        let token = self[index]
        guard token.kind == .string else { return false }
        return withBytes { buffer in
            other.withUnsafeBytes { JSONDocumentBytes.stringEquals(buffer, token, $0) }
        }
    }

    /// Token indices of an array's elements.
    func elements(_ index: Int) -> [Int] {
        let token = self[index]
        guard token.kind == .array else { return [] }
        var result = [Int]()
        result.reserveCapacity(Int(token.count))
        var element = index + 1
        for _ in 0..<Int(token.count) {
            result.append(element)
            element += Int(self[element].span)
        }
        return result
    }

    /// Calls `body` with each element index of an array, without allocating.
    @inline(__always)
    func forEachElement(_ index: Int, _ body: (Int) -> Bool) {
        let token = self[index]
        guard token.kind == .array else { return }
        var element = index + 1
        for _ in 0..<Int(token.count) {
            if !body(element) { return }
            element += Int(self[element].span)
        }
    }

    /// The value token of member `name` in object `object`. Compares the
    /// length first, then the bytes; escaped names (rare) are unescaped.
    func member(_ object: Int, _ name: UnsafeRawBufferPointer) -> Int? {
        withTokensAndBytes { tokens, buffer -> Int? in
            let token = tokens[object]
            guard token.kind == .object else { return nil }
            let count = Int(token.count)
            let length = name.count
            let base = buffer.baseAddress!
            var key = object + 1
            for _ in 0..<count {
                let keyToken = tokens[key]
                if keyToken.flag {
                    if JSONDocumentBytes.stringEquals(buffer, keyToken, name) { return key + 1 }
                } else if Int(keyToken.end &- keyToken.start) == length,
                          length == 0 || memcmp(base + Int(keyToken.start), name.baseAddress!, length) == 0 {
                    return key + 1
                }
                key += 1 + Int(tokens[key + 1].span)
            }
            return nil
        }
    }

    @inline(__always)
    func member(_ object: Int, _ name: StaticString) -> Int? {
        member(object, UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
    }

    func member(_ object: Int, _ name: [UInt8]) -> Int? {
        name.withUnsafeBytes { member(object, $0) }
    }

    /// All (name, value index) pairs of an object (cold paths).
    func members(_ object: Int) -> [(name: String, value: Int)] {
        let token = self[object]
        guard token.kind == .object else { return [] }
        var result = [(name: String, value: Int)]()
        var key = object + 1
        for _ in 0..<Int(token.count) {
            result.append((string(key) ?? "", key + 1))
            key += 1 + Int(self[key + 1].span)
        }
        return result
    }
}

