// The layer below, visible to every file of this target and to its clients (each layer re-exports
// the ones below it: `import MTLSStore` is the whole stack up to here).
@_exported import MTLSX509
