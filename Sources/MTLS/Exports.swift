// The umbrella module: `import MTLS` is the whole Swift API. Each layer re-exports the ones below
// it (see Sources/MTLS*/Layer.swift), so this one import brings base, net, X.509 (with tokens),
// store, trust, identity sources, TLS, enrollment and issuing, and lifecycle.
@_exported import MTLSLifecycle
