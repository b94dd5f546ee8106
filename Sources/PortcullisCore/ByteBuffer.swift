/// A growable byte buffer with a read index, used for the few bytes a connection
/// must keep between events (a partial head, pipelined requests, unsent output).
///
/// Storage is allocated on first use and released by `releaseIfEmpty()`, so an idle
/// connection holds no buffer memory. Not thread-safe: owned by one event loop.
public struct ByteBuffer: ~Copyable {
    private var storage: UnsafeMutableRawPointer?
    public private(set) var capacity: Int = 0
    /// First unread byte.
    public private(set) var readerIndex: Int = 0
    /// One past the last written byte.
    public private(set) var writerIndex: Int = 0

    public init() {}

    deinit { storage?.deallocate() }

    public var readableBytes: Int { writerIndex - readerIndex }
    public var isEmpty: Bool { readerIndex == writerIndex }
    public var writableBytes: Int { capacity - writerIndex }

    /// The unread bytes. Valid until the next mutation.
    public var readable: UnsafeRawBufferPointer {
        guard let storage else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: storage + readerIndex, count: readableBytes)
    }

    /// Space after the written bytes, growing to at least `minimum` bytes.
    public mutating func writableSpace(minimum: Int) -> UnsafeMutableRawBufferPointer {
        reserveWritable(minimum)
        return UnsafeMutableRawBufferPointer(start: storage! + writerIndex, count: capacity - writerIndex)
    }

    /// Marks `count` bytes of `writableSpace` as written.
    public mutating func commitWrite(_ count: Int) {
        precondition(writerIndex + count <= capacity)
        writerIndex += count
    }

    public mutating func consume(_ count: Int) {
        precondition(count <= readableBytes)
        readerIndex += count
        if readerIndex == writerIndex { readerIndex = 0; writerIndex = 0 }
    }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (storage! + writerIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        writerIndex += bytes.count
    }

    public mutating func append(_ byte: UInt8) {
        reserveWritable(1)
        storage!.storeBytes(of: byte, toByteOffset: writerIndex, as: UInt8.self)
        writerIndex += 1
    }

    public mutating func append(_ string: StaticString) {
        append(UnsafeRawBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount))
    }

    public mutating func append(_ string: String) {
        var string = string
        string.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// Appends a substring's UTF-8 without first copying it into a String.
    public mutating func append(_ string: Substring) {
        if let done: Void = string.utf8.withContiguousStorageIfAvailable({ append(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        append(String(string))
    }

    public mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { append($0) }
    }

    /// Appends a non-negative integer in decimal.
    public mutating func appendDecimal(_ value: Int) {
        precondition(value >= 0)
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch
        withUnsafeMutableBytes(of: &digits) { scratch in
            var v = value
            var i = scratch.count
            repeat {
                i -= 1
                scratch[i] = UInt8(truncatingIfNeeded: 48 + v % 10)
                v /= 10
            } while v > 0
            append(UnsafeRawBufferPointer(rebasing: scratch[i...]))
        }
    }

    /// Appends a non-negative integer in lower-case hexadecimal (chunk sizes).
    public mutating func appendHex(_ value: Int) {
        precondition(value >= 0)
        var digits: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &digits) { scratch in
            var v = value
            var i = scratch.count
            repeat {
                i -= 1
                let d = v & 0xF
                scratch[i] = UInt8(truncatingIfNeeded: d < 10 ? 48 + d : 87 + d)
                v >>= 4
            } while v > 0
            append(UnsafeRawBufferPointer(rebasing: scratch[i...]))
        }
    }

    public mutating func clear() { readerIndex = 0; writerIndex = 0 }

    /// Frees the storage when nothing is buffered, or when the buffer grew large
    /// (`keepingUpTo` bytes are kept for reuse otherwise).
    public mutating func releaseIfEmpty(keepingUpTo keep: Int = 0) {
        guard isEmpty, capacity > keep else { return }
        storage?.deallocate()
        storage = nil
        capacity = 0
        readerIndex = 0
        writerIndex = 0
    }

    private mutating func reserveWritable(_ count: Int) {
        if capacity - writerIndex >= count { return }
        // Compact first: unread bytes move to the front.
        if readerIndex > 0, capacity - readableBytes >= count, let storage {
            let n = readableBytes
            storage.copyMemory(from: storage + readerIndex, byteCount: n)
            readerIndex = 0
            writerIndex = n
            return
        }
        var newCapacity = max(capacity, 1024)
        while newCapacity - readableBytes < count { newCapacity *= 2 }
        let newStorage = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        if let storage {
            newStorage.copyMemory(from: storage + readerIndex, byteCount: readableBytes)
            storage.deallocate()
        }
        writerIndex = readableBytes
        readerIndex = 0
        storage = newStorage
        capacity = newCapacity
    }
}
