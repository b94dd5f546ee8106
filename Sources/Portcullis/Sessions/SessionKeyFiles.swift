import Foundation
import PortcullisAuth
import PortcullisCore
import PortcullisEdgeAuth
import PortcullisKeys

/// The session signing keys of a configuration, as the tools (`verify`, `mint`) use them
/// outside a running gateway: read from `sessions.access_token.signing_keys`. A gateway
/// without that list signs with a key generated at start, which no tool can see.
public enum SessionKeyFiles {
    public struct Unavailable: Error, CustomStringConvertible {
        public let description: String
    }

    static let noFiles = Unavailable(description: "sessions.access_token.signing_keys is empty: the gateway signs with a key "
                                     + "generated at start, which no tool can read; set signing_keys (portcullis keys generate FILE)")

    /// The verifying keys (every listed file's public key, `kid` = its thumbprint).
    public static func keySet(_ configuration: GatewayConfiguration) throws -> KeySet? {
        guard let sessions = configuration.sessions else { return nil }
        guard !sessions.signingKeyFiles.isEmpty else { throw noFiles }
        let keys = try sessions.signingKeyFiles.map { path in
            try AssertionKeys.loadKey(path, algorithm: .es256, purpose: "session access tokens")
        }
        let list = keys.compactMap { $0.publicJWK(keyID: $0.thumbprint) }
        let document = Array((JSONValue.object([("keys", .array(list))]).serialized + "\n").utf8)
        return try KeyDocumentFormat.detect(document).load(document)
    }

    /// The signing key (the first file) and its `kid`, as PEM text.
    public static func signer(_ configuration: GatewayConfiguration) throws -> (pem: String, keyID: String) {
        guard let path = configuration.sessions?.signingKeyFiles.first else { throw noFiles }
        let key = try AssertionKeys.loadKey(path, algorithm: .es256, purpose: "session access tokens")
        guard let data = FileManager.default.contents(atPath: path) else { throw Unavailable(description: "\(path): cannot read") }
        return (String(decoding: data, as: UTF8.self), key.thumbprint)
    }
}
