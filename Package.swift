// swift-tools-version:6.1
import PackageDescription

// Micro benchmarks (ordo-one/benchmark) are only part of the graph when
// PORTCULLIS_BENCHMARKS=1, so `swift build` and `swift test` stay lean.
let benchmarksEnabled = Context.environment["PORTCULLIS_BENCHMARKS"] == "1"

var package = Package(
    name: "Portcullis",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "portcullis", targets: ["portcullis"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", exact: "6.2.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", exact: "1.0.0"),
        // Pulled in by swift-prometheus and swift-metrics anyway; PortcullisStore uses it for the
        // shared revocation table's atomics on manually allocated memory.
        .package(url: "https://github.com/apple/swift-atomics.git", exact: "1.3.0"),
        .package(url: "https://github.com/apple/swift-collections.git", exact: "1.6.0"),
    ],
    targets: [
        // C libraries, each wrapped once in a system-library target with a shim header.
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl",
                       providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CNGHTTP2", pkgConfig: "libnghttp2",
                       providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "CHiredis", pkgConfig: "hiredis",
                       providers: [.apt(["libhiredis-dev"])]),
        // gzip for request bodies the gateway sends (OTLP traces); zlib ships with every Debian.
        .systemLibrary(name: "CZlib", pkgConfig: "zlib",
                       providers: [.apt(["zlib1g-dev"])]),
        // The few POSIX calls Glibc's Swift module does not export.
        .target(name: "CPortcullisSystem"),

        // What this binary is (version, commit, build date): the stamp is written before every build.
        .plugin(name: "BuildStampPlugin", capability: .buildTool(), path: "Sources/BuildStampPlugin"),
        .target(name: "PortcullisVersion", plugins: ["BuildStampPlugin"]),

        // Pure layers: no I/O.
        .target(name: "PortcullisCore"),
        .target(name: "PortcullisHTTP", dependencies: ["PortcullisCore"]),
        .target(name: "PortcullisAuth", dependencies: ["COpenSSL", "PortcullisCore"]),

        // I/O: Dispatch event loops and sockets (plain, or with a record layer such as TLS).
        .target(name: "PortcullisIO", dependencies: [
            "CPortcullisSystem", "PortcullisCore",
        ]),
        // TLS: the one Swift owner of libssl (server and client contexts, sessions on sockets, ticket keys).
        .target(name: "PortcullisTLS", dependencies: ["COpenSSL", "PortcullisCore", "PortcullisIO"]),
        // Redis client on the Dispatch loops (hiredis used only for its RESP reader).
        .target(name: "PortcullisRedis", dependencies: [
            "CHiredis", "PortcullisCore", "PortcullisIO", "PortcullisTLS",
            // The slot map a process's cluster clients share (`ClusterMapBoard`).
            .product(name: "Atomics", package: "swift-atomics"),
        ]),
        // Revocation storage: embedded (default) or shared through Redis.
        .target(name: "PortcullisStore", dependencies: [
            "PortcullisRedis", "PortcullisCore", "PortcullisIO",
            // The one revocation table every loop reads while a writer adds to it.
            .product(name: "Atomics", package: "swift-atomics"),
        ], exclude: ["REDIS-SCHEMA.md"]),
        // The one outbound HTTP client (key documents, the session lookup hook, trace export):
        // http and https, egress proxies (HTTPS_PROXY/NO_PROXY), gzip request bodies.
        .target(name: "PortcullisOutbound", dependencies: [
            "CZlib", "PortcullisCore", "PortcullisHTTP", "PortcullisIO", "PortcullisTLS",
        ]),
        // Prometheus text the gateway writes itself (histograms from its own counts, process_*).
        .target(name: "PortcullisMetrics", dependencies: ["PortcullisCore"]),
        // Routing, upstream pools, forwarding, header hygiene.
        .target(name: "PortcullisProxy", dependencies: [
            "PortcullisCore", "PortcullisIO", "PortcullisHTTP", "PortcullisTLS", "CNGHTTP2", "PortcullisOutbound",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
        ]),
        // Signing keys: outbound GET client (plain and TLS through PortcullisTLS), key fetch / refresh / shared cache.
        .target(name: "PortcullisKeys", dependencies: [
            "PortcullisCore", "PortcullisIO", "PortcullisHTTP", "PortcullisAuth", "PortcullisTLS", "PortcullisOutbound",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The edge-auth policy: per route, which credential is looked for and where, the
        // decision (verify, claim rules, revocation), refusal bodies, revoke-on-success and
        // the identity assertion. No I/O of its own: key refetches and revocation checks
        // come in through protocols (KeyRefetching, RevocationChecking).
        .target(name: "PortcullisEdgeAuth", dependencies: [
            "PortcullisCore", "PortcullisIO", "PortcullisHTTP", "PortcullisAuth", "PortcullisProxy",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // `rate_limits:`: GCRA per user, claim or client address, wrapped around the
        // authenticator; the embedded store (one instance) or Redis (the fleet).
        .target(name: "PortcullisRateLimit", dependencies: [
            "COpenSSL", "PortcullisCore", "PortcullisIO", "PortcullisAuth", "PortcullisProxy", "PortcullisEdgeAuth", "PortcullisRedis",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Mobile sign-in at the edge: the ID-token exchange, rotating refresh tokens, logout,
        // the device list, the lookup hook; the embedded and the Redis session stores.
        .target(name: "PortcullisSessions", dependencies: [
            "PortcullisCore", "PortcullisIO", "PortcullisProxy", "PortcullisAuth", "PortcullisRedis", "PortcullisStore",
            "PortcullisKeys", "PortcullisEdgeAuth", "PortcullisOutbound", "PortcullisTLS",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Configuration, wiring, admin endpoints, lifecycle.
        .target(name: "Portcullis", dependencies: [
            "PortcullisCore", "PortcullisIO", "PortcullisHTTP", "PortcullisProxy", "PortcullisAuth", "PortcullisRedis", "PortcullisStore", "PortcullisKeys", "PortcullisTLS", "PortcullisEdgeAuth", "PortcullisSessions", "PortcullisVersion", "PortcullisOutbound", "PortcullisMetrics", "PortcullisRateLimit",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Yams", package: "Yams"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ]),
        .executableTarget(name: "portcullis", dependencies: [
            "Portcullis", "PortcullisTLS", "PortcullisAuth", "PortcullisEdgeAuth", "PortcullisSessions",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),

        // The HTTP/2 server path's libFuzzer target (Tests/Fuzz/run-h2-fuzz.sh); a replay tool in normal builds.
        .executableTarget(name: "PortcullisHTTP2Fuzz", dependencies: ["PortcullisProxy", "PortcullisHTTP", "PortcullisIO"],
                          path: "Tests/Fuzz/HTTP2"),

        .testTarget(name: "PortcullisHTTPTests", dependencies: ["PortcullisHTTP", "PortcullisCore"]),
        .testTarget(name: "PortcullisAuthTests", dependencies: ["PortcullisAuth", "PortcullisCore", "COpenSSL"],
                    resources: [.copy("Fixtures")]),
        .testTarget(name: "PortcullisIOTests", dependencies: ["PortcullisIO", "PortcullisCore"]),
        .testTarget(name: "PortcullisTLSTests", dependencies: ["PortcullisTLS", "PortcullisIO", "PortcullisCore", "PortcullisTestSupport"]),
        .testTarget(name: "PortcullisEdgeAuthTests", dependencies: [
            "PortcullisEdgeAuth", "PortcullisAuth", "PortcullisProxy", "PortcullisIO", "PortcullisCore", "COpenSSL",
            .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "PortcullisProxyTests", dependencies: [
            "PortcullisProxy", "Portcullis", "PortcullisIO", "PortcullisTestSupport",
            .product(name: "Logging", package: "swift-log"),
        ]),
        // Real redis-server / sentinel processes for the tests that need them.
        .target(name: "PortcullisTestSupport", path: "Tests/PortcullisTestSupport"),
        // Fixtures are scripts the tests run from the source tree, not bundled resources.
        .testTarget(name: "PortcullisEndToEndTests", dependencies: ["portcullis", "PortcullisTestSupport",
                                                                     .product(name: "Yams", package: "Yams")],
                    exclude: ["Fixtures"]),
        .testTarget(name: "PortcullisRedisTests", dependencies: ["PortcullisRedis", "PortcullisIO", "PortcullisTestSupport"]),
        .testTarget(name: "PortcullisStoreTests", dependencies: ["PortcullisStore", "PortcullisRedis", "PortcullisIO", "PortcullisTestSupport"]),
        .testTarget(name: "PortcullisMetricsTests", dependencies: ["PortcullisMetrics"]),
        .testTarget(name: "PortcullisRateLimitTests", dependencies: [
            "PortcullisRateLimit", "PortcullisProxy", "PortcullisEdgeAuth", "PortcullisAuth", "PortcullisIO", "PortcullisCore",
            "PortcullisRedis", "PortcullisTestSupport", .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "PortcullisSessionsTests", dependencies: [
            "PortcullisSessions", "PortcullisProxy", "PortcullisStore", "PortcullisRedis", "PortcullisIO", "PortcullisAuth", "PortcullisTestSupport",
        ]),
        .testTarget(name: "PortcullisKeysTests", dependencies: ["PortcullisKeys", "PortcullisOutbound", "PortcullisAuth", "PortcullisIO", "PortcullisTestSupport"],
                    resources: [.copy("Fixtures")]),
    ]
)

if benchmarksEnabled {
    package.dependencies.append(
        .package(url: "https://github.com/ordo-one/benchmark.git", exact: "1.38.1",
                 traits: ["MallocInterposer"]))
    package.targets.append(
        .executableTarget(
            name: "AuthVerification",
            dependencies: [
                "PortcullisAuth", "COpenSSL",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/AuthVerification",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]))
    package.targets.append(
        .executableTarget(
            name: "StoreBenchmarks",
            dependencies: [
                "PortcullisStore", "PortcullisRedis", "PortcullisIO", "PortcullisTestSupport",
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/StoreBenchmarks",
            exclude: ["Profile"],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]))
}

// Release builds of the gateway's own modules skip Swift's runtime exclusivity checks:
// on the HTTP/2 path they cost about 3 % of the CPU per request (swift_beginAccess and
// its thread-local access set on every class-property mutation; measured with perf).
// Debug builds, which the whole test suite and the fuzzers run, keep them.
for target in package.targets where target.type == .regular || target.type == .executable {
    guard target.name.hasPrefix("Portcullis") || target.name == "portcullis" else { continue }
    target.swiftSettings = (target.swiftSettings ?? []) + [
        .unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)),
    ]
}
