import ArgumentParser
import Foundation
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
            DoctorCommand.self,
            ServeCommand.self,
            EnrollCommand.self,
            RenewCommand.self,
            TunnelCommand.self,
        ]
    )

    /// Runs the command named by the arguments. Help and version output stay ArgumentParser's;
    /// a parse or validation error becomes one line (`mtls: <message> (see 'mtls ... --help')`)
    /// on stderr, plus the `{"error": "invalid_argument", "message"}` object on stdout when
    /// `--json` was asked, and exit status 64 — instead of ArgumentParser's Error/Usage/See lines.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            var command = try parseAsRoot(arguments)
            defer { CLI.printWarnings() }  // commands that do not go through CLI.reporting
            try command.run()
        } catch {
            let code = exitCode(for: error)
            let message = self.message(for: error)
            // Help, version, and failures the command already reported (it threw an ExitCode).
            if code == .success || message.isEmpty { exit(withError: error) }
            let line = message.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .filter { !$0.isEmpty }.joined(separator: "; ")
            if arguments.contains("--json") {
                CLI.printJSON(["error": MTLSError.Code.invalidArgument.name, "message": line])
            }
            CLI.printError("\(line) (see '\(helpCommand(for: arguments)) --help')")
            Foundation.exit(code.rawValue)
        }
    }

    /// `mtls` followed by the subcommand names that lead the arguments (`mtls pki issue server`).
    static func helpCommand(for arguments: [String]) -> String {
        var words = ["mtls"]
        var command: ParsableCommand.Type = MTLSCommand.self
        for argument in arguments {
            guard let next = command.configuration.subcommands.first(where: { $0._commandName == argument }) else { break }
            words.append(argument)
            command = next
        }
        return words.joined(separator: " ")
    }
}
