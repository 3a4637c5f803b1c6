// This file owns the store's identity cache: decoded identities by row, each valid while its
// row's generation is unchanged, the least recently used dropped first.

extension CredentialStore {
    /// A decoded identity, valid while its row's generation is unchanged.
    struct CachedIdentity {
        var generation: Int64
        var identity: Identity
        var lastUse: UInt64
    }

    /// Decoded identities by row id (``CredentialStore/Options/identityCacheSize`` of them at
    /// most). Used with the store's lock held.
    struct IdentityCache {
        private var entries: [Int64: CachedIdentity] = [:]
        private var clock: UInt64 = 0

        /// The identity cached for row `id` if its generation is still `generation` (marked as
        /// just used); nil otherwise. Each call is one tick of the recency clock.
        mutating func identity(id: Int64, generation: Int64) -> Identity? {
            clock &+= 1
            if let hit = entries[id], hit.generation == generation {
                entries[id]?.lastUse = clock
                return hit.identity
            }
            return nil
        }

        /// Keeps `identity` for row `id` at `generation`, as used at the last lookup's tick, in a
        /// cache of `capacity` identities (0: nothing is kept).
        mutating func keep(_ identity: Identity, id: Int64, generation: Int64, capacity: Int) {
            if capacity > 0 {
                if entries.count >= capacity {
                    // Drop the least recently used quarter at once, so eviction stays cheap.
                    let keep = entries.sorted { $0.value.lastUse > $1.value.lastUse }.prefix(capacity * 3 / 4)
                    entries = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
                }
                entries[id] = CachedIdentity(generation: generation, identity: identity, lastUse: clock)
            }
        }

        /// Forgets every identity.
        mutating func removeAll() { entries.removeAll() }
    }
}
