import ArgumentParser
import MTLS

/// The `mtls` command line. Each group of subcommands lives in its own file.
@main
struct MTLSCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mtls",
        abstract: "Mutual-TLS client identities, trust and connections (libmtls \(MTLSVersion.string)).",
        version: MTLSVersion.string,
        subcommands: [
            CertCommand.self,
            P12Command.self,
            PKICommand.self,
            VerifyCommand.self,
            LimboCommand.self,
            TokenCommand.self,
            StoreCommand.self,
            ConnectCommand.self,
            ServeCommand.self,
        ]
    )
}
