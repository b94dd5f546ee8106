/// A growable byte buffer with a read index, used for the few bytes a connection
/// must keep between events (a partial head, pipelined requests, unsent output).
///
/// Storage is allocated on first use and released by `releaseIfEmpty()`, so an idle
/// connection holds no buffer memory. Not thread-safe: owned by one event loop.
///
/// The appends and their room check are inlinable (the check is two loads and a compare;
/// as a call across modules it was 1.1 % of the authenticated h2 row's CPU, mostly the call's
/// prologue, since header blocks are built field by field); growing is one call out of line.
public struct ByteBuffer: ~Copyable {
    @usableFromInline var storage: UnsafeMutableRawPointer?
    @usableFromInline var storedCapacity: Int = 0
    @usableFromInline var storedReaderIndex: Int = 0
    @usableFromInline var storedWriterIndex: Int = 0

    @inlinable
    public var capacity: Int { storedCapacity }
    /// First unread byte.
    @inlinable
    public var readerIndex: Int { storedReaderIndex }
    /// One past the last written byte.
    @inlinable
    public var writerIndex: Int { storedWriterIndex }

    public init() {}

    deinit { storage?.deallocate() }

    @inlinable
    public var readableBytes: Int { writerIndex - readerIndex }
    @inlinable
    public var isEmpty: Bool { readerIndex == writerIndex }
    @inlinable
    public var writableBytes: Int { capacity - writerIndex }

    /// The unread bytes. Valid until the next mutation.
    @inlinable
    public var readable: UnsafeRawBufferPointer {
        guard let storage else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: storage + readerIndex, count: readableBytes)
    }

    /// Space after the written bytes, growing to at least `minimum` bytes.
    @inlinable
    public mutating func writableSpace(minimum: Int) -> UnsafeMutableRawBufferPointer {
        reserveWritable(minimum)
        return UnsafeMutableRawBufferPointer(start: storage! + writerIndex, count: capacity - writerIndex)
    }

    /// Marks `count` bytes of `writableSpace` as written.
    @inlinable
    public mutating func commitWrite(_ count: Int) {
        precondition(writerIndex + count <= capacity)
        storedWriterIndex += count
    }

    @inlinable
    public mutating func consume(_ count: Int) {
        precondition(count <= readableBytes)
        storedReaderIndex += count
        if readerIndex == writerIndex { storedReaderIndex = 0; storedWriterIndex = 0 }
    }

    @inlinable
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        (storage! + storedWriterIndex).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        storedWriterIndex += bytes.count
    }

    @inlinable
    public mutating func append(_ byte: UInt8) {
        reserveWritable(1)
        storage!.storeBytes(of: byte, toByteOffset: storedWriterIndex, as: UInt8.self)
        storedWriterIndex += 1
    }

    /// Appends `bytes` with ASCII upper-case letters lowered (HTTP/2 field names), in one pass.
    @inlinable
    public mutating func appendLowercased(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        reserveWritable(bytes.count)
        let out = storage! + storedWriterIndex
        for i in 0..<bytes.count {
            let byte = bytes[i]
            out.storeBytes(of: byte &- 65 < 26 ? byte | 0x20 : byte, toByteOffset: i, as: UInt8.self)
        }
        storedWriterIndex += bytes.count
    }

    @inlinable
    public mutating func append(_ string: StaticString) {
        append(UnsafeRawBufferPointer(start: string.utf8Start, count: string.utf8CodeUnitCount))
    }

    @inlinable
    public mutating func append(_ string: String) {
        if let done: Void = string.utf8.withContiguousStorageIfAvailable({ append(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        var string = string  // a bridged or lazily stored string: made native once
        string.withUTF8 { append(UnsafeRawBufferPointer($0)) }
    }

    /// Appends a substring's UTF-8 without first copying it into a String.
    @inlinable
    public mutating func append(_ string: Substring) {
        if let done: Void = string.utf8.withContiguousStorageIfAvailable({ append(UnsafeRawBufferPointer($0)) }) {
            return done
        }
        append(String(string))
    }

    @inlinable
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

    @inlinable
    public mutating func clear() { storedReaderIndex = 0; storedWriterIndex = 0 }

    /// Frees the storage when nothing is buffered, or when the buffer grew large
    /// (`keepingUpTo` bytes are kept for reuse otherwise).
    public mutating func releaseIfEmpty(keepingUpTo keep: Int = 0) {
        guard isEmpty, capacity > keep else { return }
        storage?.deallocate()
        storage = nil
        storedCapacity = 0
        storedReaderIndex = 0
        storedWriterIndex = 0
    }

    @inlinable @inline(__always)
    mutating func reserveWritable(_ count: Int) {
        if storedCapacity - storedWriterIndex < count { makeWritable(count) }
    }

    @usableFromInline @inline(never)
    mutating func makeWritable(_ count: Int) {
        // Compact first: unread bytes move to the front.
        if readerIndex > 0, capacity - readableBytes >= count, let storage {
            let n = readableBytes
            storage.copyMemory(from: storage + readerIndex, byteCount: n)
            storedReaderIndex = 0
            storedWriterIndex = n
            return
        }
        var newCapacity = max(capacity, 1024)
        while newCapacity - readableBytes < count { newCapacity *= 2 }
        let newStorage = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        if let storage {
            newStorage.copyMemory(from: storage + readerIndex, byteCount: readableBytes)
            storage.deallocate()
        }
        storedWriterIndex = readableBytes
        storedReaderIndex = 0
        storage = newStorage
        storedCapacity = newCapacity
    }
}
