/// Strict base64url (RFC 4648 §5) as JOSE requires (RFC 7515 §2, App. C):
/// no `=` padding, no `+` `/`, no whitespace, `len % 4 != 1`, and the unused
/// low bits of the last character must be zero (so every byte string has
/// exactly one accepted encoding).
enum Base64URL {
    /// 0...63 for alphabet characters, 0xFF otherwise.
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        for (index, character) in alphabet.enumerated() { table[Int(character)] = UInt8(index) }
        return table
    }()
    private static let encodeTable: [UInt8] =
        Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Whether `byte` is one of the 64 characters of the alphabet.
    @inline(__always)
    static func isAlphabet(_ byte: UInt8) -> Bool { decodeTable[Int(byte)] != 0xFF }

    /// The number of bytes `count` characters decode to, or nil when no
    /// unpadded encoding has that length.
    @inline(__always)
    static func decodedLength(_ count: Int) -> Int? {
        let remainder = count & 3
        if remainder == 1 { return nil }
        return (count >> 2) * 3 + (remainder == 0 ? 0 : remainder - 1)
    }

    /// Four lookup tables of 256 entries, one per position in a group of four
    /// characters, each holding that character's bits already shifted to
    /// where they land in the group's three output bytes (little-endian
    /// word: byte 0 first). A group decodes to `t0[a] | t1[b] | t2[c] | t3[d]`,
    /// stored as one 4-byte write. Characters outside the alphabet map to
    /// `invalidEntry` (bit 24 set, which no valid word has).
    private static let groupTables: [UInt32] = {
        var tables = [UInt32](repeating: invalidEntry, count: 4 * 256)
        for character in 0..<256 {
            let sextet = UInt32(decodeTable[character])
            guard sextet < 64 else { continue }
            tables[character] = sextet << 2
            tables[256 + character] = sextet >> 4 | (sextet & 0x0F) << 12
            tables[512 + character] = (sextet >> 2) << 8 | (sextet & 0x03) << 22
            tables[768 + character] = sextet << 16
        }
        return tables
    }()
    private static let invalidEntry: UInt32 = 0x0100_0000

    /// Decodes `input` into `output`, which must hold at least
    /// `decodedLength(input.count)` bytes. Returns the number of bytes written,
    /// or nil on any character outside the alphabet or non-zero pad bits.
    /// The byte after the decoded ones may be overwritten when `output` is
    /// longer (groups are stored four bytes at a time while they fit).
    static func decode(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) -> Int? {
        guard let length = decodedLength(input.count), output.count >= length else { return nil }
        guard length > 0 else { return input.isEmpty ? 0 : nil }
        let source = input.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let target = output.baseAddress!
        let fullGroups = input.count >> 2
        // Groups whose 4-byte store stays inside `output` (the last one may not).
        let wideGroups = min(fullGroups, (output.count - 1) / 3)
        var inIndex = 0
        var outIndex = 0
        // Invalid characters set bit 24 of a group's word; OR-ing every word
        // and testing once at the end finds them without a branch per group.
        var invalid: UInt32 = 0
        groupTables.withUnsafeBufferPointer { tables in
            let t = tables.baseAddress!
            @inline(__always) func word(_ offset: Int) -> UInt32 {
                t[Int(source[offset])] | t[256 &+ Int(source[offset &+ 1])]
                    | t[512 &+ Int(source[offset &+ 2])] | t[768 &+ Int(source[offset &+ 3])]
            }
            for _ in 0..<wideGroups {
                let value = word(inIndex)
                invalid |= value
                target.storeBytes(of: value.littleEndian, toByteOffset: outIndex, as: UInt32.self)
                inIndex &+= 4
                outIndex &+= 3
            }
            for _ in wideGroups..<fullGroups {
                let value = word(inIndex)
                invalid |= value
                target.storeBytes(of: UInt8(truncatingIfNeeded: value), toByteOffset: outIndex, as: UInt8.self)
                target.storeBytes(of: UInt8(truncatingIfNeeded: value >> 8), toByteOffset: outIndex &+ 1, as: UInt8.self)
                target.storeBytes(of: UInt8(truncatingIfNeeded: value >> 16), toByteOffset: outIndex &+ 2, as: UInt8.self)
                inIndex &+= 4
                outIndex &+= 3
            }
        }
        guard invalid & invalidEntry == 0 else { return nil }
        // The last 2 or 3 characters: unused low bits must be zero.
        let remaining = input.count &- inIndex
        guard remaining > 0 else { return outIndex }
        return decodeTable.withUnsafeBufferPointer { table -> Int? in
            @inline(__always) func sextet(_ offset: Int) -> UInt32 { UInt32(table[Int(source[inIndex &+ offset])]) }
            var tailInvalid: UInt32 = 0
            let out = target.assumingMemoryBound(to: UInt8.self)
            if remaining == 2 {
                let a = sextet(0), b = sextet(1)
                tailInvalid = a | b | (b & 0x0F == 0 ? 0 : 0xC0)
                out[outIndex] = UInt8(truncatingIfNeeded: a << 2 | b >> 4)
                outIndex &+= 1
            } else {
                let a = sextet(0), b = sextet(1), c = sextet(2)
                tailInvalid = a | b | c | (c & 0x03 == 0 ? 0 : 0xC0)
                out[outIndex] = UInt8(truncatingIfNeeded: a << 2 | b >> 4)
                out[outIndex &+ 1] = UInt8(truncatingIfNeeded: (b & 0x0F) << 4 | c >> 2)
                outIndex &+= 2
            }
            return tailInvalid & 0xC0 == 0 ? outIndex : nil
        }
    }

    /// Decodes into a new array (key-load time and cold paths).
    static func decode<Bytes: Collection<UInt8>>(_ input: Bytes) -> [UInt8]? {
        let contiguous = Array(input)
        guard let length = decodedLength(contiguous.count) else { return nil }
        var output = [UInt8](repeating: 0, count: length)
        let written = contiguous.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { decode(source, into: $0) }
        }
        return written == length ? output : nil
    }

    static func decode(_ string: String) -> [UInt8]? { decode(Array(string.utf8)) }

    /// Encodes without padding.
    static func encode<Bytes: Collection<UInt8>>(_ input: Bytes) -> String {
        var out = [UInt8]()
        if input.withContiguousStorageIfAvailable({ encode($0, appendingTo: &out) }) == nil {
            encode(Array(input), appendingTo: &out)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Appends the unpadded encoding of `bytes` to `out`.
    static func encode<Source: Collection<UInt8>>(_ bytes: Source, appendingTo out: inout [UInt8]) where Source.Index == Int {
        out.reserveCapacity(out.count + (bytes.count + 2) / 3 * 4)
        var index = bytes.startIndex
        let end = bytes.endIndex
        while index + 3 <= end {
            let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
            out.append(encodeTable[Int(word >> 6 & 63)])
            out.append(encodeTable[Int(word & 63)])
            index += 3
        }
        switch end - index {
        case 1:
            let word = UInt32(bytes[index]) << 16
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
        case 2:
            let word = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out.append(encodeTable[Int(word >> 18 & 63)])
            out.append(encodeTable[Int(word >> 12 & 63)])
            out.append(encodeTable[Int(word >> 6 & 63)])
        default:
            break
        }
    }
}
