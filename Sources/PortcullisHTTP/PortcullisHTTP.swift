// PortcullisHTTP: a pure HTTP/1.1 codec (no I/O, no Foundation, stdlib only).
//
// Module guide. (Kept as comments in a Swift file rather than a Markdown file so that SwiftPM
// does not warn about an unhandled file in the target.)
//
// # PortcullisHTTP — API notes
//
// **Signature changes: none.** The API is exactly the one agreed in the brief. Additions only:
// `limits` is a public `let` on `RequestHeadParser`, `ResponseHeadParser` and `ChunkedDecoder`;
// `HTTPParseError`, `HTTPHeaderField` and `NormalizedTarget` have public memberwise `init`s.
//
// ## Using it from a connection
//
// - Keep one `RequestHeadParser` and one `RequestHead` per connection; call `parse` with the whole
//   buffered request so far (always from the request's first byte) each time bytes arrive. On
//   `.complete` the body (or the next pipelined request) starts at `head.headLength`. Call `reset()`
//   before the next request (the parser also resets itself after `.complete`/`.failure`).
// - All ranges point into the bytes you passed: keep them in place while you read the head.
// - On `.failure(e)`: answer `e.status` with `e.reason` (a literal, safe to show) and close.
// - `.contentLength(n)` is already checked against `maxBodyBytes` (413). For `.chunked`, feed body bytes
//   to a `ChunkedDecoder`; on `.done`, bytes after `consumed` belong to the next request.
// - `expectContinue`: send `100 Continue` before reading the body (only ever true for HTTP/1.1).
// - Responses: `ResponseHeadParser.parse(_:requestMethod:into:)`; every failure has status 502. A 1xx
//   (other than 101) is returned as a complete head with `.none` framing: forward or drop it and parse
//   again after `headLength`. For chunked upstream bodies use a `ChunkedDecoder` whose limits have a
//   large `maxBodyBytes` (e.g. `Int.max`), and map its failures to 502.
// - Route on `TargetNormalizer.normalize(target bytes, form:)`, never on the raw target.
//
// ## Strictness choices (request side)
//
// | Input | Status |
// |---|---|
// | `Content-Length` and `Transfer-Encoding` together (any values) | 400 |
// | `Transfer-Encoding` in an HTTP/1.0 request | 400 |
// | `Transfer-Encoding` whose final coding is not `chunked` (`xchunked`, `identity`, `chunked, identity`) | 400 |
// | `chunked` more than once (one field or several), `chunked;param`, empty list element, non-token coding | 400 |
// | well-formed, ends in `chunked`, but another coding before it (`gzip, chunked`) | 501 |
// | `Content-Length` list or repeated field: accepted only if every value is identical (`5, 5`); differing → 400 | 400 |
// | `Content-Length` with sign, space inside, hex, empty element, more than 18 digits | 400 |
// | `Content-Length` > `maxBodyBytes`; chunked total > `maxBodyBytes` | 413 |
// | obs-fold, whitespace before colon, bare CR, bare LF, NUL/CTL (except HTAB)/DEL in a value, non-token name | 400 |
// | more than 2 empty lines before the request line | 400 |
// | request line > `maxRequestLineBytes` | 414 |
// | head > `maxHeaderBytes` or more than `maxHeaderCount` fields; trailers > `maxTrailerBytes` | 431 |
// | `HTTP/x.y` other than 1.0 / 1.1 | 505 (`http/1.1`, `HTTP/1.1 ` or anything malformed → 400) |
// | missing `Host` (HTTP/1.1), more than one `Host` (any version, even identical), empty or invalid `Host` | 400 |
// | `Host` / absolute-form authority with userinfo (`user@host`), a port that is not 1–5 digits | 400 |
// | target: not origin/absolute(`http`/`https`)/asterisk(OPTIONS only)/authority(CONNECT only), CTL/space/non-ASCII, `#` | 400 |
// | `Expect` other than `100-continue` | 417 |
// | chunk size: no digits, non-hex, overflow, whitespace not followed by `;`, missing CRLF after data | 400 |
// | chunk-size line (with extensions) > `maxChunkLineBytes` | 400 |
//
// Visible ASCII other than `#` is accepted in a target (`|`, `"`, `{`… occur in real traffic); the
// normalizer decides what routing sees. `Upgrade` and `Expect` are ignored on HTTP/1.0 (RFC 9110).
//
// ## Normalization choices (TargetNormalizer)
//
// Envoy `normalize_path` + `merge_slashes`, escaped slashes rejected; additionally `/..;x/` and `/.;/`
// segments (dot segments to servlet containers, which drop path parameters first) are rejected with 400.
