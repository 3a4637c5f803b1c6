internal import COpenSSL
package import CP11Kit
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One PKCS#11 module loaded and initialised through p11-kit, finalised and released when the
/// last object using it (a listing, a session, a token key) goes away.
///
/// p11-kit "manages" the module: each load gets its own virtual function list and p11-kit
/// reference-counts the real module's `C_Initialize`/`C_Finalize`, so libmtls never finalises a
/// module under another user in the same process. Thread-safe (PKCS#11 modules loaded by
/// p11-kit are initialised for multi-threaded use).
package final class PKCS11Module: @unchecked Sendable {
    let functions: UnsafeMutablePointer<CK_FUNCTION_LIST>
    /// p11-kit's name for the module (the registration file's name, e.g. `softhsm2`), if any.
    let name: String?
    /// The module's shared-object path, if p11-kit knows it.
    package let path: String?

    private init(taking functions: UnsafeMutablePointer<CK_FUNCTION_LIST>) {
        self.functions = functions
        name = p11_kit_module_get_name(functions).map { p in defer { free(p) }; return String(cString: p) }
        path = p11_kit_module_get_filename(functions).map { p in defer { free(p) }; return String(cString: p) }
    }

    deinit {
        _ = p11_kit_module_finalize(functions)
        p11_kit_module_release(functions)
    }

    /// Loads and initialises the module file at `path` (a bare file name is looked up in
    /// p11-kit's module directory).
    static func load(path: String) throws -> PKCS11Module {
        if path.contains("/"), access(path, F_OK) != 0 {
            throw MTLSError(.notFound, "no PKCS#11 module at \(path)")
        }
        guard let m = p11_kit_module_load(path, 0) else {
            throw MTLSError(.token, "cannot load the PKCS#11 module \(path)\(p11KitMessage())")
        }
        let rv = p11_kit_module_initialize(m)
        guard rv == CKR_OK else {
            p11_kit_module_release(m)
            throw PKCS11.error(rv, "cannot initialise the PKCS#11 module \(path)")
        }
        return PKCS11Module(taking: m)
    }

    /// Loads and initialises every module registered with p11-kit (pkcs11.conf(5)) that is
    /// enabled for this program. A module that fails to initialise is skipped by p11-kit.
    package static func loadRegistered() throws -> [PKCS11Module] {
        guard let list = p11_kit_modules_load_and_initialize(0) else {
            throw MTLSError(.token, "cannot load the PKCS#11 modules registered with p11-kit\(p11KitMessage())")
        }
        defer { free(list) }  // the modules themselves are now the PKCS11Module objects'
        return entries(list).map { PKCS11Module(taking: $0) }
    }

    /// The files of the modules registered with p11-kit: the same registry as
    /// ``loadRegistered()``, but the modules are loaded WITHOUT being initialised and released at
    /// once. It cannot be ``loadRegistered()``: the store checks a stored `module-path` against
    /// this list (StoreModulePolicy) each time it reads a token reference, before any token is
    /// used, and initialising there would run every registered module's `C_Initialize` (card
    /// readers, daemons, network HSM clients) in the host program where it did not run before.
    package static func registeredPaths() -> [String] {
        guard let list = p11_kit_modules_load(nil, 0) else { return [] }
        defer { p11_kit_modules_release(list) }
        return entries(list).compactMap { m in p11_kit_module_get_filename(m).map { p in defer { free(p) }; return String(cString: p) } }
    }

    /// The modules of one of p11-kit's NULL-terminated lists (the list stays the caller's to free
    /// or release): the one walk over the registry, for both ways of loading it.
    private static func entries(_ list: UnsafeMutablePointer<UnsafeMutablePointer<CK_FUNCTION_LIST>?>) -> [UnsafeMutablePointer<CK_FUNCTION_LIST>] {
        var out: [UnsafeMutablePointer<CK_FUNCTION_LIST>] = []
        var i = 0
        while let m = list[i] {
            out.append(m)
            i += 1
        }
        return out
    }

    /// Whether a module file (a path p11-kit gave) is the one a bare name names (a URI's
    /// `module-name`, or a `module-path` without a slash): its file name. One rule for loading
    /// by name and for the store's check of a stored module path.
    package static func file(_ path: String?, isNamed name: String) -> Bool {
        path?.split(separator: "/").last.map(String.init) == name
    }

    /// The module at `path`, or else the one a URI names (`module-path`, `module-name`), or
    /// else every registered module.
    static func candidates(path: String?, uri: PKCS11URI?) throws -> [PKCS11Module] {
        if let path { return [try load(path: path)] }
        if let p = uri?.modulePath { return [try load(path: p)] }
        let all = try loadRegistered()
        if let name = uri?.moduleName {
            let named = all.filter { m in m.name == name || file(m.path, isNamed: name) }
            if named.isEmpty {
                throw MTLSError(.tokenNotPresent, "no PKCS#11 module named \"\(name)\" is registered with p11-kit")
            }
            return named
        }
        return all
    }

    /// Slots that hold a token.
    func slotsWithToken() throws -> [CK_SLOT_ID] {
        let f = functions.pointee
        var count: CK_ULONG = 0
        var rv = f.C_GetSlotList(CK_BBOOL(CK_TRUE), nil, &count)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetSlotList") }
        if count == 0 { return [] }
        var slots = [CK_SLOT_ID](repeating: 0, count: Int(count))
        rv = f.C_GetSlotList(CK_BBOOL(CK_TRUE), &slots, &count)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetSlotList") }
        return Array(slots.prefix(Int(count)))
    }

    func tokenInfo(_ slot: CK_SLOT_ID) throws -> CK_TOKEN_INFO {
        var info = CK_TOKEN_INFO()
        let rv = functions.pointee.C_GetTokenInfo(slot, &info)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetTokenInfo") }
        return info
    }

    func slotInfo(_ slot: CK_SLOT_ID) throws -> CK_SLOT_INFO {
        var info = CK_SLOT_INFO()
        let rv = functions.pointee.C_GetSlotInfo(slot, &info)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetSlotInfo") }
        return info
    }

    func moduleInfo() -> CK_INFO? {
        var info = CK_INFO()
        return functions.pointee.C_GetInfo(&info) == CKR_OK ? info : nil
    }

    private static func p11KitMessage() -> String {
        p11_kit_message().map { ": " + String(cString: $0) } ?? ""
    }
}

/// A read-only session on one token. PKCS#11 forbids using one session from two threads at
/// once, so every operation holds ``lock``; the session is closed when the last user (a token
/// key, a listing) releases it. Keeps its module loaded.
package final class PKCS11Session: @unchecked Sendable {
    let module: PKCS11Module
    /// The slot and session handle; they change only when ``reconnect()`` replaces a session
    /// lost to a removed token or a fork (under ``lock``).
    private(set) var slot: CK_SLOT_ID
    private(set) var handle: CK_SESSION_HANDLE
    let lock = Locked<Void>(())
    /// How to find the token and the key again (set for token keys); nil: no reconnection.
    package var reconnection: TokenReconnection?
    /// Key handles of the first session → the same keys in the current one.
    private var keyHandles: [CK_OBJECT_HANDLE: CK_OBJECT_HANDLE] = [:]
    /// The process the session belongs to: a fork()ed child must initialise the module again.
    private var owner = getpid()
    /// One reconnection at a time.
    private let reconnecting = Locked<Void>(())

    /// `readWrite` for sessions that create objects (key generation, certificate import).
    init(module: PKCS11Module, slot: CK_SLOT_ID, readWrite: Bool = false) throws {
        self.module = module
        self.slot = slot
        var h: CK_SESSION_HANDLE = 0
        let flags = CK_FLAGS(CKF_SERIAL_SESSION) | (readWrite ? CK_FLAGS(CKF_RW_SESSION) : 0)
        let rv = module.functions.pointee.C_OpenSession(slot, flags, nil, nil, &h)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "cannot open a session on the token") }
        handle = h
    }

    deinit { _ = module.functions.pointee.C_CloseSession(handle) }

    var f: CK_FUNCTION_LIST { module.functions.pointee }

    /// Logs the user in. `pin == nil` uses the token's protected authentication path (a PIN
    /// pad). Being logged in already (by this or another session of the application) is fine.
    func login(pin: SecretBytes?) throws {
        let rv: CK_RV = lock.withLock { _ in
            if let pin {
                return pin.withBytes { p in
                    f.C_Login(handle, CK_USER_TYPE(CKU_USER), UnsafeMutablePointer(mutating: p.baseAddress), CK_ULONG(p.count))
                }
            }
            return f.C_Login(handle, CK_USER_TYPE(CKU_USER), nil, 0)
        }
        guard rv == CKR_OK || rv == CKR_USER_ALREADY_LOGGED_IN else {
            throw PKCS11.error(rv, "cannot log in to the token")
        }
    }

    /// Handles of the objects matching `template` (at most `limit`).
    func findObjects(_ template: [PKCS11Attribute], limit: Int = 256) throws -> [CK_OBJECT_HANDLE] {
        try lock.withLock { _ in
            try PKCS11Attribute.withTemplate(template) { t, n in
                var rv = f.C_FindObjectsInit(handle, t, n)
                guard rv == CKR_OK else { throw PKCS11.error(rv, "C_FindObjectsInit") }
                defer { _ = f.C_FindObjectsFinal(handle) }
                var out: [CK_OBJECT_HANDLE] = []
                var batch = [CK_OBJECT_HANDLE](repeating: 0, count: 32)
                while out.count < limit {
                    var got: CK_ULONG = 0
                    rv = f.C_FindObjects(handle, &batch, CK_ULONG(batch.count), &got)
                    guard rv == CKR_OK else { throw PKCS11.error(rv, "C_FindObjects") }
                    if got == 0 { break }
                    out += batch.prefix(Int(got))
                }
                return out
            }
        }
    }

    /// One attribute's value, or nil when the object does not have it (or it is sensitive).
    func attribute(_ object: CK_OBJECT_HANDLE, _ type: CK_ATTRIBUTE_TYPE) throws -> [UInt8]? {
        try lock.withLock { _ in
            var a = CK_ATTRIBUTE(type: type, pValue: nil, ulValueLen: 0)
            var rv = f.C_GetAttributeValue(handle, object, &a, 1)
            if rv == CKR_ATTRIBUTE_TYPE_INVALID || rv == CKR_ATTRIBUTE_SENSITIVE { return nil }
            guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetAttributeValue") }
            if a.ulValueLen == CK_ULONG.max { return nil }
            var value = [UInt8](repeating: 0, count: Int(a.ulValueLen))
            if value.isEmpty { return [] }
            rv = value.withUnsafeMutableBytes { p in
                a.pValue = p.baseAddress
                return f.C_GetAttributeValue(handle, object, &a, 1)
            }
            guard rv == CKR_OK else { throw PKCS11.error(rv, "C_GetAttributeValue") }
            return Array(value.prefix(Int(a.ulValueLen)))
        }
    }

    /// Several attributes of one object in one call (a second one only when a value is larger
    /// than `guess` bytes); an attribute the object lacks (or hides) is absent from the result.
    func attributes(_ object: CK_OBJECT_HANDLE, _ types: [CK_ATTRIBUTE_TYPE], guess: Int = 4096) throws -> [CK_ATTRIBUTE_TYPE: [UInt8]] {
        try lock.withLock { _ in
            var sizes = [Int](repeating: guess, count: types.count)
            for attempt in 0..<2 {
                let buffers = sizes.map { UnsafeMutableRawBufferPointer.allocate(byteCount: max($0, 1), alignment: 8) }
                defer { buffers.forEach { $0.deallocate() } }
                var template = zip(types, buffers).map { t, b in
                    CK_ATTRIBUTE(type: t, pValue: b.baseAddress, ulValueLen: CK_ULONG(b.count))
                }
                let rv = f.C_GetAttributeValue(handle, object, &template, CK_ULONG(template.count))
                if rv == CKR_BUFFER_TOO_SMALL, attempt == 0 {
                    // Ask for the sizes, then read again.
                    var query = types.map { CK_ATTRIBUTE(type: $0, pValue: nil, ulValueLen: 0) }
                    let q = f.C_GetAttributeValue(handle, object, &query, CK_ULONG(query.count))
                    guard q == CKR_OK || q == CKR_ATTRIBUTE_TYPE_INVALID || q == CKR_ATTRIBUTE_SENSITIVE else {
                        throw PKCS11.error(q, "C_GetAttributeValue")
                    }
                    sizes = query.map { $0.ulValueLen == CK_ULONG.max ? 0 : Int($0.ulValueLen) }
                    continue
                }
                guard rv == CKR_OK || rv == CKR_ATTRIBUTE_TYPE_INVALID || rv == CKR_ATTRIBUTE_SENSITIVE else {
                    throw PKCS11.error(rv, "C_GetAttributeValue")
                }
                var out: [CK_ATTRIBUTE_TYPE: [UInt8]] = [:]
                for (a, b) in zip(template, buffers) where a.ulValueLen != CK_ULONG.max && Int(a.ulValueLen) <= b.count {
                    out[a.type] = Array(UnsafeRawBufferPointer(rebasing: b.prefix(Int(a.ulValueLen))))
                }
                return out
            }
            throw MTLSError(.token, "C_GetAttributeValue kept asking for a larger buffer")
        }
    }

    func ulongAttribute(_ object: CK_OBJECT_HANDLE, _ type: CK_ATTRIBUTE_TYPE) throws -> CK_ULONG? {
        guard let v = try attribute(object, type), v.count == MemoryLayout<CK_ULONG>.size else { return nil }
        return v.withUnsafeBytes { $0.loadUnaligned(as: CK_ULONG.self) }
    }

    /// Signs `input` with `mechanism` and the private key `key` (`C_SignInit` + `C_Sign`).
    ///
    /// A token key survives its token going away: when the session or the key is gone (the token
    /// was removed, the module lost its state) or the process is a fork()ed child of the one that
    /// opened the session, the session is reopened on the same token (found by serial and label,
    /// re-initialising the module when it no longer lists it), the user logged in again and the
    /// key found again by its CKA_ID, then the signature retried once. While the token stays
    /// away this throws ``MTLSError/Code/tokenRemoved``; the next signature after it is back works.
    ///
    /// `parameter`: the mechanism's parameter (CK_RSA_PKCS_PSS_PARAMS...). `contextPIN`: for a
    /// `CKA_ALWAYS_AUTHENTICATE` key, the PIN of the context-specific login (`C_Login` with
    /// `CKU_CONTEXT_SPECIFIC`) made between `C_SignInit` and `C_Sign`.
    func sign(key: CK_OBJECT_HANDLE, mechanism: CK_MECHANISM_TYPE, parameter: UnsafeMutableRawBufferPointer? = nil,
              contextPIN: SecretBytes? = nil, input: UnsafeBufferPointer<UInt8>, maxLength: Int) throws -> [UInt8] {
        if reconnection != nil, lock.withLock({ _ in owner != getpid() }) {
            try reconnectOrReportRemoved(after: "the process was forked")
        }
        let (rv, signature, step) = signOnce(key: key, mechanism: mechanism, parameter: parameter, contextPIN: contextPIN,
                                             input: input, maxLength: maxLength)
        if rv == CKR_OK { return signature }
        guard reconnection != nil, PKCS11.isLostSession(rv) else { throw PKCS11.error(rv, step) }
        try reconnectOrReportRemoved(after: PKCS11.text(rv))
        let (again, retried, retriedStep) = signOnce(key: key, mechanism: mechanism, parameter: parameter,
                                                     contextPIN: contextPIN, input: input, maxLength: maxLength)
        guard again == CKR_OK else { throw PKCS11.error(again, retriedStep) }
        return retried
    }

    private func signOnce(key: CK_OBJECT_HANDLE, mechanism: CK_MECHANISM_TYPE, parameter: UnsafeMutableRawBufferPointer?,
                          contextPIN: SecretBytes?, input: UnsafeBufferPointer<UInt8>,
                          maxLength: Int) -> (CK_RV, [UInt8], String) {
        lock.withLock { _ in
            let current = keyHandles[key] ?? key
            var mech = CK_MECHANISM(mechanism: mechanism, pParameter: parameter?.baseAddress,
                                    ulParameterLen: CK_ULONG(parameter?.count ?? 0))
            var rv = f.C_SignInit(handle, &mech, current)
            guard rv == CKR_OK else { return (rv, [], "C_SignInit on the token key") }
            var out = [UInt8](repeating: 0, count: maxLength)
            var len = CK_ULONG(maxLength)
            if let contextPIN {
                rv = contextPIN.withBytes { p in
                    f.C_Login(handle, CK_USER_TYPE(CKU_CONTEXT_SPECIFIC), UnsafeMutablePointer(mutating: p.baseAddress),
                              CK_ULONG(p.count))
                }
                guard rv == CKR_OK else {
                    // End the signing operation the token still has open (a C_Sign that fails
                    // other than for the buffer size terminates it).
                    _ = f.C_Sign(handle, UnsafeMutablePointer(mutating: input.baseAddress), CK_ULONG(input.count), &out, &len)
                    return (rv, [], "context-specific login for the signature")
                }
            }
            rv = f.C_Sign(handle, UnsafeMutablePointer(mutating: input.baseAddress), CK_ULONG(input.count), &out, &len)
            guard rv == CKR_OK else { return (rv, [], "C_Sign on the token") }
            return (rv, Array(out.prefix(Int(len))), "")
        }
    }

    private func reconnectOrReportRemoved(after cause: String) throws {
        do {
            try reconnect()
        } catch let e as MTLSError {
            let label = reconnection?.tokenLabel ?? "?"
            switch e.code {
            case .pinIncorrect, .pinLocked, .pinRequired:
                throw MTLSError(e.code, "token \"\(label)\" came back but cannot be logged in to again: \(e.message)")
            default:
                throw MTLSError(.tokenRemoved, "token \"\(label)\" was removed (\(cause)) and is not back: \(e.message)")
            }
        }
    }

    /// Opens a new session on the token (see ``sign(key:mechanism:input:maxLength:)``): first
    /// as the module stands, then, if that fails, with the module initialised afresh (a module
    /// that kept a stale view of the removed token, or a fork()ed child, where PKCS#11 requires
    /// C_Initialize again).
    func reconnect() throws {
        guard let reconnection else { throw MTLSError(.tokenRemoved, "the token session was lost") }
        // The module may use OpenSSL itself (SoftHSM does, and its C_Initialize leaves entries on
        // this thread's error queue): only libmtls's own errors may reach the TLS error.
        ERR_set_mark()
        defer { ERR_pop_to_mark() }
        try reconnecting.withLock { _ in
            let forked = lock.withLock { _ in owner != getpid() }
            if !forked, (try? reopen(reconnection, reinitialise: false)) != nil { return }
            try reopen(reconnection, reinitialise: true)
        }
    }

    private func reopen(_ reconnection: TokenReconnection, reinitialise: Bool) throws {
        lock.withLock { _ in _ = f.C_CloseSession(handle) }
        if reinitialise {
            _ = p11_kit_module_finalize(module.functions)
            let rv = p11_kit_module_initialize(module.functions)
            guard rv == CKR_OK || rv == CKR_CRYPTOKI_ALREADY_INITIALIZED else {
                throw PKCS11.error(rv, "cannot initialise the PKCS#11 module again")
            }
        }
        guard let slot = try findSlot(reconnection) else { throw MTLSError(.tokenNotPresent, "no slot holds the token") }
        var h: CK_SESSION_HANDLE = 0
        let rv = f.C_OpenSession(slot, CK_FLAGS(CKF_SERIAL_SESSION), nil, nil, &h)
        guard rv == CKR_OK else { throw PKCS11.error(rv, "cannot open a session on the token") }
        lock.withLock { _ in
            self.slot = slot
            self.handle = h
            self.owner = getpid()
        }
        try reconnection.logIn(self)
        var template: [PKCS11Attribute] = [.ulong(CK_ATTRIBUTE_TYPE(CKA_CLASS), CK_ULONG(CKO_PRIVATE_KEY))]
        if !reconnection.keyID.isEmpty { template.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_ID), reconnection.keyID)) }
        if let label = reconnection.keyLabel { template.append(.bytes(CK_ATTRIBUTE_TYPE(CKA_LABEL), Array(label.utf8))) }
        guard let key = try findObjects(template, limit: 1).first else {
            throw MTLSError(.notFound, "the key is no longer on the token")
        }
        lock.withLock { _ in keyHandles[reconnection.keyHandle] = key }
    }

    /// The slot whose token is the one `reconnection` names, or nil.
    private func findSlot(_ reconnection: TokenReconnection) throws -> CK_SLOT_ID? {
        for slot in try module.slotsWithToken() {
            guard var info = try? module.tokenInfo(slot) else { continue }
            if PKCS11Text.padded(&info.serialNumber) == reconnection.serial, PKCS11Text.padded(&info.label) == reconnection.tokenLabel {
                return slot
            }
        }
        return nil
    }

    /// Generates a key pair on the token (`C_GenerateKeyPair`); returns (public, private).
    /// `C_GenerateKeyPair`; the module's return value (CKR_OK with the new public and private
    /// key handles), so that the caller can tell a refused template from other failures.
    func generateKeyPair(mechanism: CK_MECHANISM_TYPE, publicTemplate: [PKCS11Attribute],
                         privateTemplate: [PKCS11Attribute]) throws -> (rv: CK_RV, publicKey: CK_OBJECT_HANDLE, privateKey: CK_OBJECT_HANDLE) {
        try lock.withLock { _ in
            try PKCS11Attribute.withTemplate(publicTemplate) { pub, pubCount in
                try PKCS11Attribute.withTemplate(privateTemplate) { priv, privCount in
                    var mech = CK_MECHANISM(mechanism: mechanism, pParameter: nil, ulParameterLen: 0)
                    var publicKey: CK_OBJECT_HANDLE = 0
                    var privateKey: CK_OBJECT_HANDLE = 0
                    let rv = f.C_GenerateKeyPair(handle, &mech, pub, pubCount, priv, privCount, &publicKey, &privateKey)
                    return (rv, publicKey, privateKey)
                }
            }
        }
    }

    /// The token's limits for `mechanism` (`C_GetMechanismInfo`), nil when it does not say.
    func mechanismInfo(_ mechanism: CK_MECHANISM_TYPE) -> CK_MECHANISM_INFO? {
        var info = CK_MECHANISM_INFO()
        return f.C_GetMechanismInfo(slot, mechanism, &info) == CKR_OK ? info : nil
    }

    /// Creates an object on the token (`C_CreateObject`).
    func createObject(_ template: [PKCS11Attribute]) throws -> CK_OBJECT_HANDLE {
        try lock.withLock { _ in
            try PKCS11Attribute.withTemplate(template) { t, n in
                var object: CK_OBJECT_HANDLE = 0
                let rv = f.C_CreateObject(handle, t, n, &object)
                guard rv == CKR_OK else { throw PKCS11.error(rv, "C_CreateObject") }
                return object
            }
        }
    }

    /// Destroys an object on the token (`C_DestroyObject`).
    func destroyObject(_ object: CK_OBJECT_HANDLE) throws {
        try lock.withLock { _ in
            let rv = f.C_DestroyObject(handle, object)
            guard rv == CKR_OK else { throw PKCS11.error(rv, "C_DestroyObject") }
        }
    }

    /// Closes every session of the application on this token (test hook: what a removed token
    /// looks like to the open sessions).
    package func closeAllSessions() { _ = f.C_CloseAllSessions(slot) }
}

/// What a token key's session needs to come back (see ``PKCS11Session/sign(key:mechanism:input:maxLength:)``):
/// the token by serial and label, the key by CKA_ID and label, and a login with the PIN source
/// the identity was made with (a static one; a PIN callback is not called again).
package final class TokenReconnection: Sendable {
    let tokenLabel: String
    let serial: String
    let keyHandle: CK_OBJECT_HANDLE
    let keyID: [UInt8]
    let keyLabel: String?
    let logIn: @Sendable (PKCS11Session) throws -> Void

    init(tokenLabel: String, serial: String, keyHandle: CK_OBJECT_HANDLE, keyID: [UInt8], keyLabel: String?,
         logIn: @escaping @Sendable (PKCS11Session) throws -> Void) {
        self.tokenLabel = tokenLabel
        self.serial = serial
        self.keyHandle = keyHandle
        self.keyID = keyID
        self.keyLabel = keyLabel
        self.logIn = logIn
    }
}

/// One attribute of a search template.
struct PKCS11Attribute {
    let type: CK_ATTRIBUTE_TYPE
    let value: [UInt8]

    static func ulong(_ type: CK_ATTRIBUTE_TYPE, _ v: CK_ULONG) -> PKCS11Attribute {
        withUnsafeBytes(of: v) { PKCS11Attribute(type: type, value: Array($0)) }
    }

    static func bytes(_ type: CK_ATTRIBUTE_TYPE, _ v: [UInt8]) -> PKCS11Attribute {
        PKCS11Attribute(type: type, value: v)
    }

    static func bool(_ type: CK_ATTRIBUTE_TYPE, _ v: Bool) -> PKCS11Attribute {
        PKCS11Attribute(type: type, value: [v ? 1 : 0])
    }

    /// Runs `body` with a C template pointing at the attributes' bytes.
    static func withTemplate<T>(_ attrs: [PKCS11Attribute],
                                _ body: (UnsafeMutablePointer<CK_ATTRIBUTE>?, CK_ULONG) throws -> T) throws -> T {
        // Copies live until the end of the call.
        let buffers = attrs.map { a -> UnsafeMutableRawBufferPointer in
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(a.value.count, 1), alignment: 8)
            a.value.withUnsafeBytes { if $0.count > 0 { b.copyMemory(from: $0) } }
            return b
        }
        defer { buffers.forEach { $0.deallocate() } }
        var template = zip(attrs, buffers).map { a, b in
            CK_ATTRIBUTE(type: a.type, pValue: b.baseAddress, ulValueLen: CK_ULONG(a.value.count))
        }
        return try template.withUnsafeMutableBufferPointer { try body($0.baseAddress, CK_ULONG($0.count)) }
    }
}

/// PKCS#11 return values as libmtls errors.
package enum PKCS11 {
    /// p11-kit's text for a return value (`"The PIN is incorrect"`), with its CKR_ number.
    static func text(_ rv: CK_RV) -> String {
        let t = p11_kit_strerror(rv).map { String(cString: $0) } ?? "error"
        return "\(t) (CKR 0x\(String(rv, radix: 16)))"
    }

    /// The ``MTLSError`` for a PKCS#11 return value: its own code for PIN, presence and removal
    /// problems, ``MTLSError/Code/token`` otherwise.
    static func error(_ rv: CK_RV, _ what: String) -> MTLSError {
        MTLSError(code(rv), "\(what): \(text(rv))")
    }

    /// Return values that say the session, the login or the key is gone (a removed token, a
    /// module that lost its state, a fork()ed child): a reconnection may bring them back.
    static func isLostSession(_ rv: CK_RV) -> Bool {
        [CKR_DEVICE_REMOVED, CKR_SESSION_HANDLE_INVALID, CKR_SESSION_CLOSED, CKR_TOKEN_NOT_PRESENT,
         CKR_TOKEN_NOT_RECOGNIZED, CKR_OBJECT_HANDLE_INVALID, CKR_KEY_HANDLE_INVALID, CKR_USER_NOT_LOGGED_IN,
         CKR_CRYPTOKI_NOT_INITIALIZED, CKR_DEVICE_ERROR, CKR_SLOT_ID_INVALID, CKR_GENERAL_ERROR]
            .map { CK_RV($0) }.contains(rv)
    }

    package static func code(_ rv: CK_RV) -> MTLSError.Code {
        switch rv {
        case CK_RV(CKR_PIN_INCORRECT), CK_RV(CKR_PIN_INVALID), CK_RV(CKR_PIN_LEN_RANGE): return .pinIncorrect
        case CK_RV(CKR_PIN_LOCKED), CK_RV(CKR_PIN_EXPIRED): return .pinLocked
        case CK_RV(CKR_TOKEN_NOT_PRESENT), CK_RV(CKR_TOKEN_NOT_RECOGNIZED), CK_RV(CKR_SLOT_ID_INVALID): return .tokenNotPresent
        case CK_RV(CKR_DEVICE_REMOVED), CK_RV(CKR_SESSION_HANDLE_INVALID), CK_RV(CKR_SESSION_CLOSED): return .tokenRemoved
        case CK_RV(CKR_USER_NOT_LOGGED_IN), CK_RV(CKR_USER_PIN_NOT_INITIALIZED): return .pinRequired
        case CK_RV(CKR_HOST_MEMORY): return .noMemory
        default: return .token
        }
    }
}
