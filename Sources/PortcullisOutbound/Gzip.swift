internal import CZlib

/// gzip (RFC 1952) through zlib, for request bodies sent with `Content-Encoding: gzip`
/// (OTLP/HTTP collectors take it; `compression: gzip`, the default, under `tracing:`).
public enum Gzip {
    /// `bytes` compressed at `level` (1 fastest … 9 smallest), or nil when zlib fails (out of memory).
    public static func compress(_ bytes: [UInt8], level: Int32 = 6) -> [UInt8]? {
        var stream = z_stream()
        guard portcullis_deflate_init_gzip(&stream, level) == Z_OK else { return nil }
        defer { deflateEnd(&stream) }
        var out = [UInt8](repeating: 0, count: Int(deflateBound(&stream, uLong(bytes.count))))
        let status = bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
                stream.avail_in = uInt(input.count)
                stream.next_out = output.baseAddress
                stream.avail_out = uInt(output.count)
                return deflate(&stream, Z_FINISH)  // the bound holds it all: one call
            }
        }
        guard status == Z_STREAM_END else { return nil }
        out.removeSubrange(Int(stream.total_out)...)
        return out
    }
}
