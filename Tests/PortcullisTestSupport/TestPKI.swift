import Foundation

/// A throwaway certificate authority made at test time with the `openssl` command,
/// in its own temporary folder: leaf certificates for chosen DNS names (EC P-256
/// or RSA-2048), expired or not-yet-valid ones, chains through an intermediate.
public final class TestPKI: @unchecked Sendable {
    // @unchecked Sendable: files are written once per call; tests use one PKI from one thread.
    public let directory: String
    public var caCertificate: String { directory + "/ca.pem" }
    private var counter = 0

    public struct Leaf {
        public var certificate: String
        public var key: String
        /// The certificate's serial number (hex), to tell two certificates apart.
        public var serial: String
        public init(certificate: String, key: String, serial: String) {
            self.certificate = certificate
            self.key = key
            self.serial = serial
        }
    }

    public enum KeyType: String { case ec, rsa }

    public init(name: String = "Portcullis Test CA") throws {
        directory = RedisProcess.makeDirectory()
        try run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", directory + "/ca.key", "-out", caCertificate, "-days", "3",
                 "-subj", "/CN=\(name)",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    }

    /// A leaf for `names` (DNS, and IP addresses given as "IP:…"), signed by the CA
    /// (or by `issuer`), valid from `startDays` to `endDays` relative to now.
    public func leaf(_ names: [String], keyType: KeyType = .ec, startDays: Int = -1, endDays: Int = 2,
                     issuer: Leaf? = nil, isCA: Bool = false, clientAuth: Bool = false) throws -> Leaf {
        counter += 1
        let base = "\(directory)/leaf\(counter)"
        let keyArgs = keyType == .ec ? ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"] : ["-newkey", "rsa:2048"]
        try run(["req"] + keyArgs + ["-nodes", "-keyout", base + ".key", "-out", base + ".csr",
                                    "-subj", "/CN=\(names.first ?? "leaf")"])
        let san = names.map { $0.hasPrefix("IP:") ? $0 : "DNS:\($0)" }.joined(separator: ",")
        var ext = isCA ? "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
            : "basicConstraints=CA:FALSE\nextendedKeyUsage=\(clientAuth ? "clientAuth" : "serverAuth")\n"
        if !san.isEmpty { ext += "subjectAltName=\(san)\n" }
        try ext.write(toFile: base + ".ext", atomically: true, encoding: .utf8)
        let caCert = issuer?.certificate ?? caCertificate
        let caKey = issuer?.key ?? directory + "/ca.key"
        // `openssl ca` (not `x509 -req`): OpenSSL 3.0 sets arbitrary validity dates only there.
        try run(["ca", "-batch", "-config", try caConfig(), "-cert", caCert, "-keyfile", caKey, "-in", base + ".csr",
                 "-out", base + ".pem", "-extfile", base + ".ext", "-notext",
                 "-startdate", Self.date(days: startDays), "-enddate", Self.date(days: endDays)])
        let serial = try run(["x509", "-in", base + ".pem", "-noout", "-serial"])
            .replacingOccurrences(of: "serial=", with: "")
        return Leaf(certificate: base + ".pem", key: base + ".key", serial: serial)
    }

    /// A minimal `openssl ca` configuration (database and serial in the folder).
    private func caConfig() throws -> String {
        let path = directory + "/ca.cnf"
        if FileManager.default.fileExists(atPath: path) { return path }
        try FileManager.default.createDirectory(atPath: directory + "/issued", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: directory + "/index.txt", contents: nil)
        try "1000\n".write(toFile: directory + "/serial", atomically: true, encoding: .utf8)
        try """
        [ca]
        default_ca = test
        [test]
        database = \(directory)/index.txt
        new_certs_dir = \(directory)/issued
        serial = \(directory)/serial
        default_md = sha256
        policy = any
        unique_subject = no
        [any]
        commonName = supplied

        """.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Writes `parts` (PEM files) one after another into a new file; returns its path.
    public func concatenate(_ parts: [String]) throws -> String {
        counter += 1
        let path = "\(directory)/bundle\(counter).pem"
        let text = try parts.map { try String(contentsOfFile: $0, encoding: .utf8) }.joined()
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func date(days: Int) -> String {
        let formatter = DateFormatter()
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyMMddHHmmss'Z'"
        return formatter.string(from: Date().addingTimeInterval(Double(days) * 86_400))
    }

    /// Runs `openssl` with `arguments`; stdout on success.
    @discardableResult
    public func run(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let error = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw RedisTestFailure("openssl \(arguments.prefix(2).joined(separator: " ")): \(String(decoding: error, as: UTF8.self))")
        }
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
