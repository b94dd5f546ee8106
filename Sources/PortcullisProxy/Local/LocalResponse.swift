import PortcullisCore

/// A response the gateway writes itself (errors, auth challenges, admin and demo
/// endpoints). Bodies are small.
public struct LocalResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var contentType: String
    /// Why the authenticator refused (`no_credential`, `expired`, `revoked`, …: a constant,
    /// never built per request), for the access log; nil for any other answer.
    public var authReason: String?

    public init(status: Int, contentType: String = "application/json", headers: [(name: String, value: String)] = [], body: [UInt8]) {
        self.status = status
        self.contentType = contentType
        self.headers = headers
        self.body = body
    }

    /// `{"error": "<message>"}`, as the seeds' backends answer.
    public static func error(_ status: Int, _ message: String, headers: [(name: String, value: String)] = []) -> LocalResponse {
        LocalResponse(status: status, headers: headers, body: Array("{\"error\":\(JSONText.quoted(message))}\n".utf8))
    }

    public static func json(_ status: Int, _ text: String) -> LocalResponse {
        LocalResponse(status: status, body: Array(text.utf8))
    }

    /// Serializes the response; `close` adds `Connection: close`.
    func encode(into buffer: inout ByteBuffer, headOnly: Bool, close: Bool) {
        buffer.append("HTTP/1.1 ")
        buffer.appendDecimal(status)
        buffer.append(" ")
        buffer.append(HTTPStatusText.reason(status))
        buffer.append("\r\ncontent-type: ")
        buffer.append(contentType)
        buffer.append("\r\ncontent-length: ")
        buffer.appendDecimal(body.count)
        buffer.append("\r\n")
        for (name, value) in headers {
            buffer.append(name)
            buffer.append(": ")
            buffer.append(value)
            buffer.append("\r\n")
        }
        if close { buffer.append("connection: close\r\n") }
        buffer.append("\r\n")
        if !headOnly { buffer.append(body) }
    }
}

public enum HTTPStatusText {
    public static func reason(_ status: Int) -> String {
        switch status {
        case 100: return "Continue"
        case 101: return "Switching Protocols"
        case 200: return "OK"
        case 201: return "Created"
        case 204: return "No Content"
        case 302: return "Found"
        case 304: return "Not Modified"
        case 307: return "Temporary Redirect"
        case 308: return "Permanent Redirect"
        case 400: return "Bad Request"
        case 401: return "Unauthorized"
        case 403: return "Forbidden"
        case 404: return "Not Found"
        case 405: return "Method Not Allowed"
        case 408: return "Request Timeout"
        case 411: return "Length Required"
        case 413: return "Content Too Large"
        case 414: return "URI Too Long"
        case 417: return "Expectation Failed"
        case 429: return "Too Many Requests"
        case 431: return "Request Header Fields Too Large"
        case 500: return "Internal Server Error"
        case 501: return "Not Implemented"
        case 502: return "Bad Gateway"
        case 503: return "Service Unavailable"
        case 504: return "Gateway Timeout"
        case 505: return "HTTP Version Not Supported"
        default: return "Status"
        }
    }
}
