import Testing

/// Every suite of this target nests here so `.serialized` covers them all:
/// they start key-server processes and share one event loop.
@Suite(.serialized) struct PortcullisKeysTests {}
