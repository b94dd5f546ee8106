import Foundation
import PortcullisTestSupport
import Testing
import Yams

/// The deploy artefacts (#26.4), checked as far as this machine allows (no container
/// runtime here): the Kubernetes base rendered with `kubectl kustomize` and held against the
/// configuration it ships; the systemd unit through `systemd-analyze verify`; the image's
/// runtime stage against what the binary links, and its entrypoint command line run on this
/// host; the Compose file against its gateway configuration. Every shipped configuration
/// passes `portcullis check-config` with the secrets the artefact provides.
@Suite(.serialized) struct DeployArtefactsTests {
    static let root = E2E.packageRoot.path

    static func file(_ path: String) throws -> String {
        try String(contentsOfFile: "\(root)/\(path)", encoding: .utf8)
    }

    /// `5s`, `20s`, `1m` as seconds.
    static func seconds(_ text: String?) -> Double {
        guard let text, let unit = text.last, let value = Double(text.dropLast()) else { return -1 }
        switch unit {
        case "s": return value
        case "m": return value * 60
        default: return -1
        }
    }

    static func port(_ address: Any?) -> Int? {
        (address as? String).flatMap { Int($0.split(separator: ":").last ?? "") }
    }

    /// `${NAME}` references without a default in a configuration's text.
    static func requiredVariables(_ text: String) -> Set<String> {
        let regex = try! NSRegularExpression(pattern: #"\$\{([A-Z0-9_]+)\}"#)
        let range = NSRange(text.startIndex..., in: text)
        return Set(regex.matches(in: text, range: range).map { String(text[Range($0.range(at: 1), in: text)!]) })
    }

    static func checkConfig(_ path: String, environment: [String: String]) -> (Int32, String) {
        portcullis(["check-config", path], environment: environment)
    }

    /// The binary with exactly `environment` (and PATH); exit status and standard error.
    static func portcullis(_ arguments: [String], environment: [String: String]) -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: E2E.binary)
        process.arguments = arguments
        process.environment = ["PATH": "/usr/bin:/bin"].merging(environment) { $1 }
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        try? process.run()
        let data = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    static func envFile(_ text: String) -> [String: String] {
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let eq = line.firstIndex(of: "=") else { continue }
            values[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        return values
    }

    // MARK: Kubernetes

    @Test func theKubernetesBaseAgreesWithTheConfigurationItShips() throws {
        let (status, out, err) = E2E.run("/usr/bin/env", ["kubectl", "kustomize", "\(Self.root)/deploy/kubernetes"], timeout: 60)
        try #require(status == 0, "kubectl kustomize (kubectl >= 1.21, as on this machine kind): \(err)")
        let documents = try Yams.load_all(yaml: out).compactMap { $0 as? [String: Any] }
        try Self.holdAgainstItsConfiguration(documents, secrets: Self.envFile(try Self.file("deploy/kubernetes/secrets.env")))
    }

    /// A rendered workload (the kustomize base, the Helm chart) against the configuration it
    /// ships: ports, probes, the grace period, secrets as files with a key for every file the
    /// configuration reads, hardening, selectors; and `check-config` on the embedded file with
    /// the secrets written as the kubelet would (`secrets`: the values the Secret was rendered
    /// from, placeholders).
    static func holdAgainstItsConfiguration(_ documents: [[String: Any]], secrets placeholders: [String: String]) throws {
        func one(_ kind: String) throws -> [String: Any] {
            try #require(documents.first { $0["kind"] as? String == kind }, "no \(kind) rendered")
        }
        let configMap = try one("ConfigMap"), secret = try one("Secret"), deployment = try one("Deployment")
        let budget = try one("PodDisruptionBudget")
        let service = try #require(documents.first {
            $0["kind"] as? String == "Service"
                && ((($0["spec"] as? [String: Any])?["ports"] as? [[String: Any]])?.first?["name"] as? String) == "http"
        }, "no Service for the listener")
        let configText = try #require((configMap["data"] as? [String: Any])?["portcullis.yaml"] as? String)
        let config = try #require(try Yams.load(yaml: configText) as? [String: Any])

        let podSpec = try #require(((deployment["spec"] as? [String: Any])?["template"] as? [String: Any])?["spec"] as? [String: Any])
        let container = try #require((podSpec["containers"] as? [[String: Any]])?.first)
        // Ports: the listener and the admin listener the configuration names.
        let ports = (container["ports"] as? [[String: Any]] ?? []).reduce(into: [String: Int]()) {
            $0[$1["name"] as? String ?? ""] = $1["containerPort"] as? Int
        }
        let listen = (config["listen"] as? [[String: Any]])?.first?["address"]
        #expect(ports["http"] == Self.port(listen) && ports["http"] != nil, "\(ports) vs \(String(describing: listen))")
        #expect(ports["admin"] == Self.port((config["admin"] as? [String: Any])?["address"]) && ports["admin"] != nil)
        #expect(((config["admin"] as? [String: Any])?["address"] as? String)?.hasPrefix("0.0.0.0:") == true,
                "the kubelet reaches the admin listener from the node")
        // Probes: readiness and startup on /readyz, liveness on /healthz, all on the admin port.
        func probe(_ name: String) -> (String?, String?) {
            let get = (container[name] as? [String: Any])?["httpGet"] as? [String: Any]
            return (get?["path"] as? String, get?["port"] as? String)
        }
        #expect(probe("startupProbe") == ("/readyz", "admin") && probe("readinessProbe") == ("/readyz", "admin"))
        #expect(probe("livenessProbe") == ("/healthz", "admin"))
        // The grace period covers the drain delay and the grace.
        let shutdown = config["shutdown"] as? [String: Any]
        let needed = Self.seconds(shutdown?["drain_delay"] as? String) + Self.seconds(shutdown?["grace"] as? String)
        let granted = Double(podSpec["terminationGracePeriodSeconds"] as? Int ?? 0)
        #expect(needed > 0 && granted > needed, "terminationGracePeriodSeconds \(granted) for \(needed) s")
        // Secrets: files, never the environment. The Secret is mounted where the configuration
        // reads its files, holds a key for every file it reads, and is readable by the pod's group.
        #expect(container["envFrom"] == nil && container["env"] == nil, "secrets are files, not variables")
        let secretVolume = (podSpec["volumes"] as? [[String: Any]])?.first { ($0["secret"] as? [String: Any]) != nil }
        let secretSource = secretVolume?["secret"] as? [String: Any] ?? [:]
        #expect(secretSource["secretName"] as? String == (secret["metadata"] as? [String: Any])?["name"] as? String)
        #expect(secretSource["defaultMode"] as? Int == 0o440 && (podSpec["securityContext"] as? [String: Any])?["fsGroup"] as? Int == 65532)
        let secretMount = (container["volumeMounts"] as? [[String: Any]])?.first { $0["name"] as? String == secretVolume?["name"] as? String }
        let secretDir = try #require(secretMount?["mountPath"] as? String)
        let secretFiles = Set(Self.matches(#"\{file: *"?([^"}]+)"?\}"#, configText))
        let secretKeys = Set((secret["data"] as? [String: Any] ?? [:]).keys)
        #expect(!secretFiles.isEmpty && secretFiles == Set(secretKeys.map { "\(secretDir)/\($0)" }), "\(secretFiles) vs \(secretKeys)")
        #expect(Self.requiredVariables(configText).isEmpty, "no ${VAR} left: \(Self.requiredVariables(configText))")
        // Configuration: the ConfigMap mounted where the arguments point.
        let volume = (podSpec["volumes"] as? [[String: Any]])?.first { ($0["configMap"] as? [String: Any]) != nil }
        #expect((volume?["configMap"] as? [String: Any])?["name"] as? String == (configMap["metadata"] as? [String: Any])?["name"] as? String)
        let mount = (container["volumeMounts"] as? [[String: Any]])?.first { $0["name"] as? String == volume?["name"] as? String }
        let configPath = (container["args"] as? [String] ?? []).last ?? ""
        #expect(configPath == "\(mount?["mountPath"] as? String ?? "-")/portcullis.yaml", "\(configPath)")
        // Hardening.
        let pod = podSpec["securityContext"] as? [String: Any] ?? [:]
        let own = container["securityContext"] as? [String: Any] ?? [:]
        #expect(pod["runAsNonRoot"] as? Bool == true && (pod["runAsUser"] as? Int ?? 0) > 0)
        #expect(own["readOnlyRootFilesystem"] as? Bool == true && own["allowPrivilegeEscalation"] as? Bool == false)
        #expect((own["capabilities"] as? [String: Any])?["drop"] as? [String] == ["ALL"])
        // The budget and the Service select the Deployment's pods; the Service targets the listener.
        let podLabels = ((deployment["spec"] as? [String: Any])?["template"] as? [String: Any]).flatMap {
            ($0["metadata"] as? [String: Any])?["labels"] as? [String: String]
        } ?? [:]
        let budgetSelector = ((budget["spec"] as? [String: Any])?["selector"] as? [String: Any])?["matchLabels"] as? [String: String] ?? [:]
        #expect(!budgetSelector.isEmpty && budgetSelector.allSatisfy { podLabels[$0.key] == $0.value })
        let serviceSpec = service["spec"] as? [String: Any] ?? [:]
        #expect((serviceSpec["selector"] as? [String: String] ?? [:]).allSatisfy { podLabels[$0.key] == $0.value })
        #expect((serviceSpec["ports"] as? [[String: Any]])?.first?["targetPort"] as? String == "http")
        // The embedded configuration, its secret files written as the kubelet would: with the
        // base's placeholders it is refused (naming the key, never the value); with real values
        // it passes.
        func check(_ values: [String: String]) throws -> (Int32, String) {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("k8s-secrets-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            for (key, value) in values { try value.write(toFile: "\(dir)/\(key)", atomically: true, encoding: .utf8) }
            let configFile = try AppFitEndToEndTests.writeConfig(configText.replacingOccurrences(of: secretDir, with: dir))
            return Self.checkConfig(configFile, environment: [:])
        }
        let refused = try check(placeholders)
        #expect(refused.0 == 2 && refused.1.contains("is a placeholder") && !refused.1.contains("replace-me-with"), "\(refused.1)")
        let real = try check(placeholders.mapValues { _ in "k8s-" + UUID().uuidString + UUID().uuidString })
        #expect(real.0 == 0, "check-config: \(real.1)")
    }

    // MARK: Helm

    /// The chart's tools (deploy/helm/install-tools.sh, run by deploy/test.sh): helm and
    /// kubernetes-validate, pinned, in .build/tools.
    static let tools = ProcessInfo.processInfo.environment["PORTCULLIS_TOOLS"] ?? "\(root)/.build/tools"
    static let chart = "\(root)/deploy/helm/portcullis"

    /// `helm template` of the chart with `values` (`--set` pairs); exit status, output, error.
    static func helm(_ arguments: [String], _ values: [String] = []) -> (Int32, String, String) {
        E2E.run("\(tools)/bin/helm", arguments + values.flatMap { ["--set", $0] }, timeout: 120)
    }

    static func render(_ values: [String]) throws -> [[String: Any]] {
        let (status, out, err) = helm(["template", "gw", chart, "--namespace", "edge"], values)
        try #require(status == 0, "helm template: \(err)")
        return try Yams.load_all(yaml: out).compactMap { $0 as? [String: Any] }
    }

    /// Every object rendered with every feature on, held against the Kubernetes API schemas
    /// (kubernetes-validate --strict: unknown fields refused) and, for the Prometheus
    /// Operator's ServiceMonitor (a CRD), against the fields of its v1 schema the chart uses.
    static func validate(_ documents: [[String: Any]]) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("chart-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var files: [String] = []
        for (index, document) in documents.enumerated() {
            let data = try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys])
            let path = "\(dir)/\(index)-\(document["kind"] as? String ?? "?").json"
            try data.write(to: URL(fileURLWithPath: path))
            if document["kind"] as? String == "ServiceMonitor" {
                let schema = "\(E2E.packageRoot.path)/Tests/PortcullisEndToEndTests/Fixtures/servicemonitor.schema.json"
                let (status, out, err) = E2E.run("\(tools)/bin/jsonschema", ["-i", path, schema], timeout: 60)
                #expect(status == 0, "ServiceMonitor against its schema: \(out) \(err)")
            } else {
                files.append(path)
            }
        }
        for version in ["1.29.0", "1.37.0"] {   // the oldest Kubernetes still supported upstream as we write, and the newest
            let (status, out, err) = E2E.run("\(tools)/bin/kubernetes-validate", ["--strict", "--quiet", "-k", version] + files, timeout: 120)
            #expect(status == 0, "kubernetes-validate \(version): \(out) \(err)")
        }
    }

    @Test func theHelmChartRendersValidatedObjectsThatAgreeWithItsConfiguration() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "\(Self.tools)/bin/helm"),
                     "helm is missing: run bash deploy/helm/install-tools.sh (deploy/test.sh does)")
        // Lint (the values schema included), strict.
        let lint = Self.helm(["lint", "--strict", Self.chart], ["secrets.existingSecret=portcullis-secrets"])
        #expect(lint.0 == 0, "helm lint: \(lint.1) \(lint.2)")
        // Closed defaults: no Secret named and no values → refused, naming what to set; a typo
        // in the values → refused by the schema, naming the key.
        let bare = Self.helm(["template", "gw", Self.chart])
        #expect(bare.0 != 0 && bare.2.contains("secrets.existingSecret"), "\(bare.2)")
        let typo = Self.helm(["template", "gw", Self.chart], ["secrets.existingSecret=s", "replicaCuont=3"])
        #expect(typo.0 != 0 && typo.2.contains("replicaCuont"), "\(typo.2)")
        let wrongType = Self.helm(["template", "gw", Self.chart], ["secrets.existingSecret=s", "ports.admin=0"])
        #expect(wrongType.0 != 0 && wrongType.2.contains("ports.admin"), "\(wrongType.2)")

        // The defaults with the Secret rendered from values: the same checks as the kustomize base.
        let placeholders = Self.envFile(try Self.file("deploy/kubernetes/secrets.env"))
        let defaults = try Self.render(placeholders.map { "secrets.values.\($0.key)=\($0.value)" })
        try Self.holdAgainstItsConfiguration(defaults, secrets: placeholders)
        #expect(defaults.map { $0["kind"] as? String ?? "" }.sorted()
                == ["ConfigMap", "Deployment", "PodDisruptionBudget", "Secret", "Service"])
        let base = try String(contentsOfFile: "\(Self.root)/deploy/kubernetes/portcullis.yaml", encoding: .utf8)
        let shipped = (defaults.first { $0["kind"] as? String == "ConfigMap" }?["data"] as? [String: Any])?["portcullis.yaml"] as? String
        #expect(shipped?.trimmingCharacters(in: .whitespacesAndNewlines) == base.trimmingCharacters(in: .whitespacesAndNewlines),
                "the chart ships the kustomize base's configuration")

        // An existing Secret: nothing rendered for it, the pods mount it, the ServiceMonitor
        // reads the token from it. Every feature on, every object validated.
        let all = try Self.render(["secrets.existingSecret=edge-secrets", "serviceMonitor.enabled=true",
                                   "networkPolicy.enabled=true", "autoscaling.enabled=true", "autoscaling.maxReplicas=6"])
        try Self.validate(all)
        func one(_ kind: String, _ name: String? = nil) throws -> [String: Any] {
            try #require(all.first { $0["kind"] as? String == kind && (name == nil || ($0["metadata"] as? [String: Any])?["name"] as? String == name) },
                         "no \(kind) \(name ?? "")")
        }
        #expect(!all.contains { $0["kind"] as? String == "Secret" })
        let deployment = try one("Deployment")
        let spec = deployment["spec"] as? [String: Any] ?? [:]
        let template = spec["template"] as? [String: Any] ?? [:]
        let podLabels = (template["metadata"] as? [String: Any])?["labels"] as? [String: String] ?? [:]
        let pod = template["spec"] as? [String: Any] ?? [:]
        func selects(_ selector: Any?) -> Bool {
            let labels = (selector as? [String: Any])?["matchLabels"] as? [String: String] ?? [:]
            return !labels.isEmpty && labels.allSatisfy { podLabels[$0.key] == $0.value }
        }
        let secretVolume = (pod["volumes"] as? [[String: Any]])?.compactMap { $0["secret"] as? [String: Any] }.first
        #expect(secretVolume?["secretName"] as? String == "edge-secrets")
        // Autoscaling replaces the replica count; the HPA scales this Deployment on CPU.
        #expect(spec["replicas"] == nil)
        let hpa = try one("HorizontalPodAutoscaler")["spec"] as? [String: Any] ?? [:]
        #expect((hpa["scaleTargetRef"] as? [String: Any])?["name"] as? String == (deployment["metadata"] as? [String: Any])?["name"] as? String)
        #expect(hpa["maxReplicas"] as? Int == 6 && (hpa["minReplicas"] as? Int ?? 0) >= 2)
        // Spread over nodes and zones, selecting the gateway's own pods.
        let spread = pod["topologySpreadConstraints"] as? [[String: Any]] ?? []
        #expect(Set(spread.compactMap { $0["topologyKey"] as? String }) == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"])
        #expect(!spread.isEmpty && spread.allSatisfy { selects($0["labelSelector"]) })
        // The ServiceMonitor scrapes /metrics on the admin Service's port with the admin token
        // from the Secret the pods mount; the admin Service selects the pods and is headless.
        let monitor = try one("ServiceMonitor")["spec"] as? [String: Any] ?? [:]
        let endpoint = (monitor["endpoints"] as? [[String: Any]])?.first ?? [:]
        #expect(endpoint["path"] as? String == "/metrics" && endpoint["port"] as? String == "admin")
        let credentials = (endpoint["authorization"] as? [String: Any])?["credentials"] as? [String: Any]
        #expect(credentials?["name"] as? String == "edge-secrets" && credentials?["key"] as? String == "PORTCULLIS_ADMIN_TOKEN")
        let admin = try one("Service", "gw-portcullis-admin")
        let adminSpec = admin["spec"] as? [String: Any] ?? [:]
        let adminLabels = (admin["metadata"] as? [String: Any])?["labels"] as? [String: String] ?? [:]
        let wanted = (monitor["selector"] as? [String: Any])?["matchLabels"] as? [String: String] ?? [:]
        #expect(!wanted.isEmpty && wanted.allSatisfy { adminLabels[$0.key] == $0.value }, "the ServiceMonitor selects the admin Service")
        #expect(adminSpec["clusterIP"] as? String == "None" && (adminSpec["selector"] as? [String: String] ?? [:]).allSatisfy { podLabels[$0.key] == $0.value })
        #expect((adminSpec["ports"] as? [[String: Any]])?.map { $0["targetPort"] as? String } == ["admin"])
        // The main Service carries only the listener.
        let main = try one("Service", "gw-portcullis")["spec"] as? [String: Any] ?? [:]
        #expect((main["ports"] as? [[String: Any]])?.map { $0["targetPort"] as? String } == ["http"])
        // The NetworkPolicy: the listener open, the admin port only from adminFrom's sources.
        let policy = try one("NetworkPolicy")["spec"] as? [String: Any] ?? [:]
        #expect(selects(policy["podSelector"]) && policy["policyTypes"] as? [String] == ["Ingress"])
        let rules = policy["ingress"] as? [[String: Any]] ?? []
        func rule(_ port: String) -> [String: Any]? {
            rules.first { ($0["ports"] as? [[String: Any]])?.contains { $0["port"] as? String == port } == true }
        }
        #expect(rule("http") != nil && rule("http")?["from"] == nil, "the listener is open")
        let adminFrom = rule("admin")?["from"] as? [[String: Any]] ?? []
        #expect(!adminFrom.isEmpty, "the admin port is closed to all but adminFrom")
        #expect(rules.count == 2, "no other port is opened: \(rules)")
        // A budget that selects the pods.
        #expect(selects((try one("PodDisruptionBudget")["spec"] as? [String: Any])?["selector"]))
    }

    /// Every capture of `pattern`'s first group in `text`.
    static func matches(_ pattern: String, _ text: String) -> [String] {
        guard let regex = try? NSRegularExpression(pattern: pattern) else { return [] }
        return regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        }
    }

    // MARK: systemd

    @Test func theSystemdUnitVerifies() throws {
        let (present, _, _) = E2E.run("/usr/bin/env", ["sh", "-c", "command -v systemd-analyze"])
        try #require(present == 0, "systemd-analyze is part of systemd on Debian 12")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        // The unit as shipped, with its two host paths pointed at this build and an empty env file.
        let unit = try Self.file("deploy/systemd/portcullis.service")
            .replacingOccurrences(of: "/usr/local/bin/portcullis", with: E2E.binary)
            .replacingOccurrences(of: "/etc/portcullis/env", with: "\(dir)/env")
        FileManager.default.createFile(atPath: "\(dir)/env", contents: Data())
        try unit.write(toFile: "\(dir)/portcullis.service", atomically: true, encoding: .utf8)
        let (status, out, err) = E2E.run("/usr/bin/env", ["systemd-analyze", "verify", "\(dir)/portcullis.service"], timeout: 60)
        #expect(status == 0 && err.isEmpty && out.isEmpty, "\(out)\(err)")
        for hardening in ["NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes", "CapabilityBoundingSet=\n",
                          "SystemCallFilter=@system-service", "TimeoutStopSec=30"] {
            #expect(unit.contains(hardening), "\(hardening)")
        }
    }

    // MARK: The image

    struct Containerfile {
        let runtime: [String]  // the runtime stage's instructions, continuation lines joined

        init(_ text: String) {
            var lines: [String] = []
            var current = ""
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) where !line.hasPrefix("#") {
                current += line.hasSuffix("\\") ? String(line.dropLast()) : String(line)
                if !line.hasSuffix("\\") { if !current.trimmingCharacters(in: .whitespaces).isEmpty { lines.append(current) }; current = "" }
            }
            let start = lines.lastIndex { $0.hasPrefix("FROM ") } ?? 0
            runtime = Array(lines[start...])
        }

        func instruction(_ name: String) -> String? {
            runtime.last { $0.hasPrefix(name + " ") }.map { String($0.dropFirst(name.count + 1)) }
        }

        func jsonArray(_ name: String) -> [String] {
            guard let text = instruction(name), let start = text.firstIndex(of: "[") else { return [] }
            return (try? JSONSerialization.jsonObject(with: Data(text[start...].utf8)) as? [String]) ?? []
        }
    }

    /// The runtime stage installs a package for every shared library the binary links
    /// (outside glibc, libgcc and the Swift runtime, which the build links statically);
    /// it runs as a non-root user; its HEALTHCHECK is `portcullis health` on its own
    /// configuration.
    @Test func theImageRuntimeHasWhatTheBinaryLinksAndRunsUnprivileged() throws {
        let file = Containerfile(try Self.file("deploy/container/Containerfile"))
        let installs = file.runtime.first { $0.contains("apt-get install") } ?? ""
        let (_, ldd, _) = E2E.run("/usr/bin/ldd", [E2E.binary])
        var needed: Set<String> = []
        for line in ldd.split(separator: "\n") {
            guard let arrow = line.range(of: "=> ") else { continue }
            // dpkg knows the merged-/usr path of the file itself (not /lib/… nor the soname link).
            let linked = String(line[arrow.upperBound...].split(separator: " ").first ?? "")
            let path = URL(fileURLWithPath: linked).resolvingSymlinksInPath().path
            guard path.hasPrefix("/lib") || path.hasPrefix("/usr/lib") else { continue }  // the Swift toolchain's own: static in the image
            guard !path.contains("/swift/") else { continue }
            let (status, owner, _) = E2E.run("/usr/bin/dpkg", ["-S", path])
            guard status == 0, let package = owner.split(separator: ":").first.map(String.init) else { continue }
            if ["libc6", "libgcc-s1"].contains(package) { continue }  // in debian:bookworm-slim
            needed.insert(package)
        }
        #expect(needed.contains("libssl3") && needed.contains("libnghttp2-14") && needed.contains("libhiredis0.14"), "\(needed)")
        for package in needed {
            #expect(installs.contains(" \(package)"), "the runtime stage does not install \(package): \(installs)")
        }
        let user = file.instruction("USER") ?? "root"
        #expect(!user.hasPrefix("root") && !user.hasPrefix("0"), "USER \(user)")
        #expect(file.jsonArray("ENTRYPOINT") == ["/usr/local/bin/portcullis"])
        #expect(file.jsonArray("CMD") == ["run", "--config", "/etc/portcullis/portcullis.yaml"])
        #expect(file.jsonArray("HEALTHCHECK") == ["/usr/local/bin/portcullis", "health", "--config", "/etc/portcullis/portcullis.yaml"])
        #expect(file.runtime.contains("COPY deploy/container/portcullis.yaml /etc/portcullis/portcullis.yaml"))
        #expect(file.runtime.contains { $0.contains("--static-swift-stdlib") } == false, "built in the build stage")
        #expect(try Self.file("deploy/container/Containerfile").contains("--static-swift-stdlib"))
    }

    /// The image's entrypoint command line (`portcullis run --config <its file>`) on this
    /// host, with the environment the file asks for (its ports moved to free ones): it
    /// serves, the HEALTHCHECK command passes, and a token of its secret reaches the app.
    @Test func theImageCommandLineRunsOnThisHost() throws {
        let upstream = try EchoUpstream()
        let (port, admin) = (Loopback.freePort(), Loopback.freePort())
        let config = try Self.file("deploy/container/portcullis.yaml")
            .replacingOccurrences(of: "0.0.0.0:8080", with: "127.0.0.1:\(port)")
            .replacingOccurrences(of: "0.0.0.0:9901", with: "127.0.0.1:\(admin)")
        let path = try AppFitEndToEndTests.writeConfig(config)
        let secret = AppFitEndToEndTests.secret
        let environment = ["AUTH_SECRET": secret, "PORTCULLIS_ADMIN_TOKEN": "image-admin-token-0123456789",
                           "APP_URL": "http://127.0.0.1:\(upstream.port)", "PATH": "/usr/bin:/bin"]
        let check = Self.checkConfig(path, environment: environment)
        #expect(check.0 == 0, "\(check.1)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: E2E.binary)
        process.arguments = ["run", "--config", path]
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { E2E.stop(process, signal: SIGTERM) }
        #expect(Loopback.waitForPort(admin))
        // The HEALTHCHECK's command, with the container's environment.
        let health = Self.portcullis(["health", "--config", path], environment: environment)
        #expect(health.0 == 0, "\(health)")
        let token = try AppFitEndToEndTests.mint(#"{"sub": "image-user", "exp": "+600"}"#, secret: secret)
        #expect(E2E.curl(["-H", "Authorization: Bearer \(token)", "http://127.0.0.1:\(port)/x"]).status == 200)
        #expect(E2E.curl(["http://127.0.0.1:\(port)/x"]).status == 401)
    }

    // MARK: Compose

    @Test func theComposeFileAgreesWithItsGatewayConfiguration() throws {
        let compose = try #require(try Yams.load(yaml: try Self.file("deploy/compose.yaml")) as? [String: Any])
        let services = try #require(compose["services"] as? [String: [String: Any]])
        let configText = try Self.file("deploy/compose/portcullis.yaml")
        let config = try #require(try Yams.load(yaml: configText) as? [String: Any])
        func address(_ service: String) -> String? {
            ((services[service]?["networks"] as? [String: Any])?["portcullis"] as? [String: Any])?["ipv4_address"] as? String
        }
        let gateways = services.keys.filter { $0.hasPrefix("gateway-") }.sorted()
        #expect(gateways.count == 2)
        let sentinels = services.keys.filter { $0.hasPrefix("sentinel-") }.sorted()
        #expect(sentinels.count == 3 && services["redis"] != nil && services["redis-replica"] != nil)
        // The gateways' store: the Sentinels' addresses; the apps' address for upstreams and keys.
        let store = config["store"] as? [String: Any] ?? [:]
        let configured = Set((store["sentinel"] as? [String: Any])?["addresses"] as? [String] ?? [])
        #expect(configured == Set(sentinels.compactMap { address($0).map { "\($0):26379" } }), "\(configured)")
        let apps = try #require(address("apps"))
        for (_, upstream) in config["upstreams"] as? [String: [String: Any]] ?? [:] {
            #expect((upstream["url"] as? String)?.contains("//\(apps):") == true)
        }
        #expect(configText.contains("http://\(apps):3004/"), "the key host")
        #expect((services["apps"]?["command"] as? [String])?.prefix(1) == ["demo-apps"])
        let shutdown = config["shutdown"] as? [String: Any]
        let needed = Self.seconds(shutdown?["drain_delay"] as? String) + Self.seconds(shutdown?["grace"] as? String)
        for name in gateways {
            let gateway = services[name] ?? [:]
            #expect(gateway["read_only"] as? Bool == true, "\(name)")
            #expect((gateway["volumes"] as? [String])?.contains("./compose/portcullis.yaml:/etc/portcullis/portcullis.yaml:ro") == true, "\(name)")
            #expect(Self.seconds(gateway["stop_grace_period"] as? String) > needed, "\(name)")
            let ports = gateway["ports"] as? [String] ?? []
            #expect(ports.contains { $0.hasSuffix(":8080") } && ports.contains { $0.hasSuffix(":9901") }, "\(ports)")
        }
        // The configuration passes check-config with the Compose file's default secrets.
        let defaults = try #require(compose["x-secrets"] as? [String: String])
        var environment: [String: String] = [:]
        for (key, value) in defaults {
            // "${NAME:-default}" → default
            if let range = value.range(of: ":-") { environment[key] = String(value[range.upperBound...].dropLast()) }
        }
        #expect(Self.requiredVariables(configText).isSubset(of: Set(environment.keys)))
        let check = Self.checkConfig(try AppFitEndToEndTests.writeConfig(configText), environment: environment)
        #expect(check.0 == 0 && check.1.isEmpty, "\(check.1)")
        // Only because it is marked a demo: the same file without `demo: true` refuses them.
        let unmarked = Self.checkConfig(try AppFitEndToEndTests.writeConfig(configText.replacingOccurrences(of: "\ndemo: true\n", with: "\n")),
                                        environment: environment)
        #expect(unmarked.0 == 2 && unmarked.1.contains("is a placeholder"), "\(unmarked.1)")
    }
}
